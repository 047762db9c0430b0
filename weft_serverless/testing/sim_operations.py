"""The operator's actions on schedules, listings and bulk operations (rows of ``ACTIONS``).

Schedules are ``sch{n}`` (ids never reused), firing ``sim`` runs of a short program every few
seconds under a drawn overlap policy. A listing compares what ``list`` and ``count`` answer
for a filter with a full read of the runs, when no other engine moved in the middle of the
call (a preemption makes the two reads two different moments). A bulk operation is a dry run
then the confirmed call, with a small page so that a crash, a stop at a page boundary or a
second worker resuming it lands between pages.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from weft_serverless.engine.engine import Engine
from weft_serverless.engine.persistence.index_entries import ATTRIBUTES_FIELD, TAGS_FIELD
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Storage
from weft_serverless.workflow import WorkflowDefinition


@dataclass
class Drawn:
    """What earlier draws of one scenario made, for later actions to aim at."""

    runs: list[str] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)


class Stage(Protocol):
    """What an action reads and records of the world it acts in."""

    now: float
    store: Storage
    flows: dict[str, WorkflowDefinition]
    ownership: str
    floods: int
    moves: int
    signal_attempts: int
    started: set[str]
    signals_delivered: dict[str, set[Any]]
    updates_ok: dict[str, set[str]]
    tokens: list[tuple[str, int, str]]
    completed_tokens: set[str]
    schedules: list[str]
    known_runs: dict[str, None]
    listing_problems: list[str]

    def intervene(self, workflow_id: str) -> None: ...

    def crash_acting(self, why: str) -> None: ...

    def claim_options(self) -> dict[str, Any]: ...

    def journal_as(
        self, engine_id: str
    ) -> Callable[[Sequence[Condition], Sequence[Op], bool], None]: ...


# -- schedules -------------------------------------------------------------------------------

SCHEDULE_PROGRAMS: list[list[list[Any]]] = [
    [["act", None]],
    [["sleep", 4.0]],
    [["act", None], ["sleep", 9.0]],
    [["signal", None]],
    [["update", None], ["act", None]],
]
OVERLAPS = ("skip", "queue", "cancel_running", "allow")


def draw_schedule(rng: random.Random, drawn: Drawn) -> list[Any]:
    sid = f"sch{len(drawn.schedules)}"
    drawn.schedules.append(sid)
    every = rng.choice([5.0, 10.0, 15.0, 20.0])
    return [sid, every, rng.choice(OVERLAPS), rng.randrange(len(SCHEDULE_PROGRAMS))]


def run_schedule(world: Stage, engine: Engine, args: list[Any]) -> None:
    sid, every, overlap, program = args
    world.schedules.append(sid)
    engine.schedule(sid, "sim", {"prog": SCHEDULE_PROGRAMS[program]}, every=every, overlap=overlap)


def draw_schedule_move(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.choice(drawn.schedules) if drawn.schedules else "sch0"]


def schedule_move(method: str) -> Callable[[Stage, Engine, list[Any]], None]:
    def run(world: Stage, engine: Engine, args: list[Any]) -> None:
        getattr(engine.get_schedule(args[0]), method)()

    return run


def draw_schedule_update(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [*draw_schedule_move(rng, drawn), rng.choice([5.0, 12.0]), rng.choice(OVERLAPS)]


def run_schedule_update(world: Stage, engine: Engine, args: list[Any]) -> None:
    sid, every, overlap = [*args, 7.0, "skip"][:3]
    engine.get_schedule(sid).update(every=every, overlap=overlap)


# -- listing ---------------------------------------------------------------------------------

LIST_FILTERS: list[dict[str, Any]] = [
    {"status": "running"},
    {"workflow_type": "simq"},
    {"where": {"region": "eu"}},
    {"where": {"stage": (">=", 2)}},
    {"where": {"stage": ("!=", 1)}, "status": "completed"},
    {"tags": ["red"]},
    {"tags": ["blue"], "where": {"region": ("in", ["us"])}},
    {"status": "pending", "workflow_type": "simq"},
    {"where": {"stage": ("<", 2)}, "tags": ["red", "blue"]},
    {},
]


def draw_list(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.randrange(len(LIST_FILTERS))]


def run_list(world: Stage, engine: Engine, args: list[Any]) -> None:
    """``list`` and ``count`` for a filter, against a full read of the runs, when no other
    engine moved in the middle of the call (the reads would see two moments)."""
    moves = world.moves
    found = compare_listing(engine, world.store, world.known_runs, args[0])
    if world.moves == moves:
        world.listing_problems += found


def compare_listing(engine: Engine, store: Storage, runs: Iterable[str], index: int) -> list[str]:
    """What ``list`` (every page) and ``count`` answer for filter ``index`` of
    ``LIST_FILTERS``, where it differs from a full read of ``runs``."""
    query = LIST_FILTERS[index % len(LIST_FILTERS)]
    listed: list[str] = []
    cursor: str | None = None
    while True:
        rows, cursor = engine.list_page(limit=7, cursor=cursor, **query)
        listed += [row.id for row in rows]
        if cursor is None:
            break
    counted = engine.count(**query)
    expected = sorted(wf for wf in runs if _matches(store, wf, query))
    name = f"list({query})"
    problems = []
    if sorted(listed) != expected:
        missing, extra = sorted(set(expected) - set(listed)), sorted(set(listed) - set(expected))
        problems.append(f"{name} misses {missing} and lists {extra}")
    if len(listed) != len(set(listed)):
        problems.append(f"{name} lists a run twice: {listed}")
    if sum(counted.values()) != len(listed):
        problems.append(f"count of {name} is {counted}, list has {len(listed)}")
    return problems


def _matches(store: Storage, wf: str, query: dict[str, Any]) -> bool:
    """Whether the stored run passes the filter, judged from its state alone."""
    data = store.get(keys.state_key(wf))
    if data is None:
        return False
    state = WorkflowState.from_bytes(data)
    attributes = state.extra.get(ATTRIBUTES_FIELD) or {}
    tags = set(state.extra.get(TAGS_FIELD) or ())
    if query.get("status") not in (None, state.status):
        return False
    if query.get("workflow_type") not in (None, state.type):
        return False
    if not set(query.get("tags", ())) <= tags:
        return False
    return all(_holds(attributes, name, term) for name, term in query.get("where", {}).items())


def _holds(attributes: dict[str, Any], name: str, term: Any) -> bool:
    op, value = term if isinstance(term, tuple) else ("==", term)
    if name not in attributes:
        return bool(op == "!=")
    have = attributes[name]
    if op == "in":
        return bool(have in value)
    if op in (">=", "<"):
        return bool(have >= value) is bool(op == ">=")
    return bool(have == value) is bool(op == "==")


# -- bulk operations -------------------------------------------------------------------------

BULK_KINDS: list[tuple[str, dict[str, Any]]] = [
    ("signal", {"status": "running"}),
    ("signal", {"status": "running", "workflow_type": "simq"}),
    ("retry", {"status": "failed"}),
    ("cancel", {"status": "running", "tags": ["red"]}),
    ("cancel", {"workflow_type": "simr"}),
]


def draw_bulk(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.randrange(len(BULK_KINDS)), rng.choice([1, 2, 3])]


def run_bulk(world: Stage, engine: Engine, args: list[Any]) -> None:
    kind, filters = BULK_KINDS[args[0] % len(BULK_KINDS)]
    world.signal_attempts += 1
    call: Callable[..., Any]
    if kind == "signal":
        payload = f"bulk{world.signal_attempts}"

        def call(**options: Any) -> Any:
            return engine.signal_all("go", payload, **options, **filters)
    elif kind == "retry":

        def call(**options: Any) -> Any:
            return engine.retry_failed_all(**options, **filters)
    else:

        def call(**options: Any) -> Any:
            return engine.cancel_all(**options, **filters)

    preview = call(dry_run=True)
    call(confirm=preview.token, page_size=args[1])


def draw_bulk_resume(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.randrange(1000)]


def run_bulk_resume(world: Stage, engine: Engine, args: list[Any]) -> None:
    """A second worker carries a stored operation on (the oldest running one first)."""
    running = [op for op in engine.list_bulk_operations() if op.status == "running"]
    if running:
        engine.resume_bulk(running[args[0] % len(running)].id)
