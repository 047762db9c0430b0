"""What the workload and the operator do in the simulated world: the table of actions.

Each action is drawn as data (``[name, engine, scope, *args]``, so a scenario is JSON and
replays exactly) and carried out by one engine. Actions see the world through ``Stage``, the
few things they read and record, so this table does not depend on the world's machinery.
Adding an action is one entry in ``ACTIONS``; the schedule, listing and bulk actions are in
``sim_operations``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from weft_serverless.engine.engine import Engine
from weft_serverless.engine.persistence.records import TERMINAL, WorkflowState
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import sim_hints as hints
from weft_serverless.testing import sim_operations as ops
from weft_serverless.testing.sim_faults import FaultyStorage
from weft_serverless.testing.sim_hints import PASS_CAP
from weft_serverless.testing.sim_operations import Drawn, Stage
from weft_serverless.testing.sim_workload import (
    QUEUED,
    REJECTING,
    RETIRED,
    WORKFLOW,
    random_program,
    retired_workflow,
)

FLOOD_RUNS = PASS_CAP + 1  # runs a flood starts, all timers in one shard: more than a pass reads
FLOOD_PREFIX = "flood"
FLOOD_WEIGHT = 0.15
"""Weight of ``flood`` in generated schedules (about one schedule in ten has one). Cheap
because passes here read ``PASS_CAP`` timers, not the engine's default of 1,000."""


@dataclass(frozen=True)
class ActionSpec:
    """An action: its weight, how to draw its args, and how an engine carries it out."""

    weight: float
    draw: Callable[[random.Random, Drawn], list[Any]]
    run: Callable[[Stage, Engine, list[Any]], None]


def _pick(rng: random.Random, drawn: Drawn) -> str:
    return rng.choice(drawn.runs) if drawn.runs else "w0"


def _family(wf: str, program: list[list[Any]]) -> list[str]:
    """A run's children and grandchildren (``{parent}.c{step}``), targets of later actions."""
    found = []
    for step, (name, arg) in enumerate(program):
        if name == "child":
            child = f"{wf}.c{step}"
            found += [child, *_family(child, arg[1])]
    return found


def _draw_start(rng: random.Random, drawn: Drawn) -> list[Any]:
    """A new run ``w{n}`` of a drawn type, tags and region, sometimes delayed, sometimes
    with an execution timeout; its children's ids join the targets of later actions too."""
    wf = f"w{sum(1 for known in drawn.runs if '.' not in known)}"
    program = random_program(rng, rng.randint(1, 5))
    drawn.runs += [wf, *_family(wf, program)]
    delay = rng.choice([0, 0, 0, round(rng.uniform(0.5, 6.0), 1)])
    kind = rng.choices([WORKFLOW, QUEUED, REJECTING], [6, 2, 1])[0]
    tags = [tag for tag in ("red", "blue") if rng.random() < 0.4]
    timeout = round(rng.uniform(8.0, 60.0), 1) if rng.random() < 0.2 else 0
    return [wf, program, delay, kind, rng.choice("ab"), tags, rng.choice(["eu", "us"]), timeout]


def _run_start(world: Stage, engine: Engine, args: list[Any]) -> None:
    wf, program, delay, *rest = args
    kind, ck, tags, region, timeout = rest or [WORKFLOW, "a", [], "eu", 0]
    world.started.add(wf)
    engine.start(
        kind,
        {"prog": program, "ck": ck},
        id=wf,
        start_after=delay or None,
        tags=tags,
        search_attributes={"region": region},
        execution_timeout=timeout or None,
    )


def _draw_signal(rng: random.Random, drawn: Drawn) -> list[Any]:
    sid = rng.choice([None, f"s{rng.randrange(6)}"])
    return [_pick(rng, drawn), sid]


def _run_signal(world: Stage, engine: Engine, args: list[Any]) -> None:
    wf, sid = args
    world.signal_attempts += 1
    payload = sid if sid is not None else f"anon{world.signal_attempts}"
    engine.signal(wf, "go", payload, signal_id=None if sid is None else f"{wf}/{sid}")
    world.signals_delivered.setdefault(wf, set()).add(payload)


def _draw_update(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [_pick(rng, drawn), rng.choice([1, 1, 1, -1]), f"u{rng.randrange(1000)}"]


def _run_update(world: Stage, engine: Engine, args: list[Any]) -> None:
    wf, payload, update_id = args
    engine.update(wf, "approve", payload, update_id=f"{wf}/{update_id}")
    if payload >= 0:
        world.updates_ok.setdefault(wf, set()).add(update_id)


def _draw_wf(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [_pick(rng, drawn)]


def _operator(method: str) -> Callable[[Stage, Engine, list[Any]], None]:
    def run(world: Stage, engine: Engine, args: list[Any]) -> None:
        if method not in INTERVENTIONS:
            getattr(engine, method)(args[0])
            return
        # Counted before and after: it may land and still raise, and other engines may act
        # while it runs (a preemption), on either side of the moment it lands.
        world.intervene(args[0])
        try:
            getattr(engine, method)(args[0])
        finally:
            world.intervene(args[0])

    return run


def _draw_finished(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.randrange(1000)]


def _run_purge(world: Stage, engine: Engine, args: list[Any]) -> None:
    """Purge one of the runs finished now (a purge of a running one is refused, and the
    partition's deletes after the state's are what a purge can get wrong)."""
    finished = [wf for wf in world.known_runs if _finished(world.store, wf)]
    if finished:
        engine.purge(finished[args[0] % len(finished)])


def _finished(store: Storage, wf: str) -> bool:
    data = store.get(keys.state_key(wf))
    return data is not None and WorkflowState.from_bytes(data).status in TERMINAL


def _run_query(world: Stage, engine: Engine, args: list[Any]) -> None:
    engine.query(args[0], "where")


def _draw_complete(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.randrange(1000), rng.random() < 0.8]


def _run_complete(world: Stage, engine: Engine, args: list[Any]) -> None:
    if not world.tokens:
        return
    wf, step, token = world.tokens[args[0] % len(world.tokens)]
    if args[1]:
        engine.complete_activity(token, f"answer:{wf}/{step}")
        world.completed_tokens.add(token)
    else:
        engine.fail_activity(token, "refused")


def _run_maintenance(world: Stage, engine: Engine, args: list[Any]) -> None:
    engine.run_maintenance(max_timers=PASS_CAP)


def _draw_advance(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [round(rng.choice([0.3, 1.0, 2.0, rng.uniform(0.1, 9.0)]), 2)]


def _run_advance(world: Stage, engine: Engine, args: list[Any]) -> None:
    world.now += float(args[0])


EDGES = {"exact": 0.0, "noise": -5e-7, "under-a-ms": -4e-4}
"""Where ``advance-edge`` puts an engine's clock against the next timer: on it, below it by
float rounding (engine clocks add offsets), or under a millisecond below it."""


def _draw_edge(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.choice(list(EDGES))]


def _run_edge(world: Stage, engine: Engine, args: list[Any]) -> None:
    """Time moves to the edge of the earliest timer not due yet, on this engine's clock, and
    the engine runs a pass: timers compare whole milliseconds, and nothing fires early."""
    bound = keys.timer_due_bound(world.now)
    dues = [
        keys.timer_due_of(sort)
        for shard in range(keys.TIMER_SHARDS)
        for sort, _ in world.store.scan(keys.timer_partition(shard), gte=bound, limit=1)
    ]
    if not dues:
        return
    skew = engine.runtime.clock() - world.now
    world.now = max(world.now, min(dues) + EDGES[args[0]] - skew)
    engine.run_maintenance(max_timers=PASS_CAP)


def _run_crash(world: Stage, engine: Engine, args: list[Any]) -> None:
    world.crash_acting("crash between actions")


def _nothing(_rng: random.Random, _drawn: Drawn) -> list[Any]:
    return []


def _draw_flood(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [FLOOD_RUNS, 0]  # the shard a pass reads first: the worst case


def _run_flood(world: Stage, engine: Engine, args: list[Any]) -> None:
    """An old deploy starts ``n`` sleeping runs of a type the current engines no longer
    have, all timers in one shard, and is retired: their timers fall due and can never fire,
    so every pass retains them (defect shape: a retired workflow type's backlog)."""
    count, shard = args
    flood, n = world.floods, 0
    world.floods += 1
    old = Engine.create(
        FaultyStorage(
            world.store, lambda _counter, _partition: None, world.journal_as(f"old{flood}")
        ),
        {**world.flows, **retired_workflow()},
        ownership=world.ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=lambda: world.now,
        engine_id=f"old{flood}",
        max_clock_skew=math.inf,
        max_parallel_activities=0,
        recover=False,
        **world.claim_options(),
    )
    try:
        while count > 0:
            wf = f"{FLOOD_PREFIX}{flood}.{n}"
            n += 1
            if keys.shard_of(wf, keys.TIMER_SHARDS) == shard:
                old.start(RETIRED, None, id=wf)
                count -= 1
    finally:
        old.close()  # under lease: the old deploy leaves the store's lease behind


ACTIONS: dict[str, ActionSpec] = {
    "start": ActionSpec(3, _draw_start, _run_start),
    "signal": ActionSpec(2, _draw_signal, _run_signal),
    "update": ActionSpec(1, _draw_update, _run_update),
    "query": ActionSpec(0.5, _draw_wf, _run_query),
    "cancel": ActionSpec(0.4, _draw_wf, _operator("cancel")),
    "suspend": ActionSpec(0.4, _draw_wf, _operator("suspend")),
    "resume": ActionSpec(0.6, _draw_wf, _operator("resume")),
    "retry": ActionSpec(0.5, _draw_wf, _operator("retry")),
    "purge": ActionSpec(0.3, _draw_finished, _run_purge),
    "complete": ActionSpec(1, _draw_complete, _run_complete),
    "maintain": ActionSpec(4, _nothing, _run_maintenance),
    "advance": ActionSpec(4, _draw_advance, _run_advance),
    "advance-edge": ActionSpec(0.6, _draw_edge, _run_edge),
    "crash": ActionSpec(0.3, _nothing, _run_crash),
    # More due timers in one shard than a maintenance pass reads (see FLOOD_WEIGHT).
    "flood": ActionSpec(FLOOD_WEIGHT, _draw_flood, _run_flood),
    "schedule": ActionSpec(0.35, ops.draw_schedule, ops.run_schedule),
    "sched-pause": ActionSpec(0.2, ops.draw_schedule_move, ops.schedule_move("pause")),
    "sched-resume": ActionSpec(0.2, ops.draw_schedule_move, ops.schedule_move("resume")),
    "sched-trigger": ActionSpec(0.2, ops.draw_schedule_move, ops.schedule_move("trigger")),
    "sched-update": ActionSpec(0.1, ops.draw_schedule_update, ops.run_schedule_update),
    "sched-delete": ActionSpec(0.05, ops.draw_schedule_move, ops.schedule_move("delete")),
    "list": ActionSpec(0.5, ops.draw_list, ops.run_list),
    "bulk": ActionSpec(0.3, ops.draw_bulk, ops.run_bulk),
    "bulk-resume": ActionSpec(0.15, ops.draw_bulk_resume, ops.run_bulk_resume),
    # Timer hints lost, duplicated, early and reordered; maintenance workers on shares.
    "hint": ActionSpec(3, hints.draw_hint, hints.run_hint),  # type: ignore[arg-type]
    "maintain-share": ActionSpec(2, hints.draw_share, hints.run_share),  # type: ignore[arg-type]
    "share-of": ActionSpec(0, _nothing, hints.run_share_of),  # type: ignore[arg-type]
}
"""Every action of the workload and the operator: name -> spec. A new action is one entry."""


SCOPES = (0, 0, 1, 1, 2)
INTERVENTIONS = frozenset({"suspend", "resume", "retry"})
"""Operator moves after which a step in flight may rightly run again: suspending a run
deposes the engine inside its activity, and a retry re-runs the failed step."""


PREEMPT_MOVES: tuple[tuple[str, ...], ...] = (
    ("maintain",),
    ("resume",),
    ("signal",),
    ("cancel",),
    ("update",),
)
"""What another engine may do in the middle of a preempted call (each a short sequence)."""
PREEMPT_MOVES_AT_WRITES = (*PREEMPT_MOVES, ("suspend", "resume"))
"""Also a suspend and resume elsewhere, before a write, or before a read about another run
than the target. Not before a read about the target itself: between a drive's claim check
and its activity, a suspend and resume elsewhere make the activity run once more (its commit
is fenced out), a window the activity invariant cannot tell from a defect."""
SCHEDULE_MOVES = (("sched-pause",), ("sched-resume",), ("sched-trigger",), ("sched-update",))
"""What another engine may do to a schedule in the middle of a call about schedules."""


def preemption(
    rng: random.Random, runs: list[str], schedules: list[str], partition: str, at_write: bool
) -> list[tuple[str, list[Any]]]:
    """The moves another engine makes in the middle of a call about ``partition``."""
    if partition == keys.SCHEDULE_PARTITION and schedules and rng.random() < 0.8:
        target = rng.choice(schedules)
        return [(name, [target]) for name in rng.choice(SCHEDULE_MOVES)]
    if partition == keys.BULK_PARTITION and rng.random() < 0.8:
        return [("bulk-resume", [rng.randrange(1000)])]
    focus = keys.dec(partition[3:]) if partition.startswith("wf#") else None
    roll = rng.random()
    if focus is not None and focus in runs and roll < 0.6:
        target = rng.choice([focus, *(run for run in runs if run.startswith(focus + ".c"))])
    else:
        target = rng.choice(runs[-3:] if roll < 0.8 else runs)
    moves = PREEMPT_MOVES_AT_WRITES if at_write or target != focus else PREEMPT_MOVES
    out: list[tuple[str, list[Any]]] = []
    for name in rng.choice(moves):
        args: list[Any] = [] if name == "maintain" else [target]
        if name == "signal":
            args.append(None)
        if name == "update":
            args += [1, f"p{rng.randrange(1000)}"]
        out.append((name, args))
    return out


def random_actions(
    rng: random.Random, steps: int, engines: int, weights: Mapping[str, float] | None = None
) -> list[list[Any]]:
    """``steps`` actions ``[name, engine, scope, *args]``, starting with a start.

    ``scope`` is 0 (a plain call), 1 (inside an invocation scope) or 2 (an invocation with no
    time left: every step is deferred to the next invocation behind a timer due now).

    ``weights`` overrides the table's weights by name (e.g. ``{"flood": 0.2}``).
    """
    table = {name: spec.weight for name, spec in ACTIONS.items()} | dict(weights or {})
    names = [name for name, weight in table.items() if weight > 0]
    chances = [table[name] for name in names]
    drawn = Drawn()
    actions: list[list[Any]] = []
    for n in range(steps):
        name = "start" if n == 0 else rng.choices(names, chances)[0]
        args = ACTIONS[name].draw(rng, drawn)
        actions.append([name, rng.randrange(engines), rng.choice(SCOPES), *args])
    return actions
