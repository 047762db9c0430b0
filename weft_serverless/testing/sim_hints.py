"""Timer hints and maintenance shares in the simulated world (ADR 0054, ADR 0055).

Each engine incarnation gets a ``QueuedHints`` port: what it sends joins one world queue
(``world.hints``), as SQS holds what every function sent. The ``hint`` action takes one queued
hint, chosen by an index drawn as data (taken modulo the queue's length at run time, so a
shrunk schedule still runs), and gives it a fate: delivered at its due time (plus a drawn
delay) to the acting engine's ``fire_timer_hints`` and removed, delivered and kept (a
duplicate, delivered again later), dropped (lost), or delivered early (the world's time does
not move). A dead incarnation's port sends nothing more. The ``maintain-share`` action runs
one worker's pass of the seed's ``workers``; sometimes a second engine runs an overlapping
share right after. ``parallel_fires`` stays 1 here: threads would make the order of fires the
OS scheduler's, and a seed would no longer replay.

Two invariants are judged at the call, since only then is it known what the engine saw: a
hint delivered at or after its due time fires its timer before the call returns
(``hinted-timers-fire-at-once``), and a hint delivered early whose timer still waits is sent
again (``early-hints-are-sent-again``); both hold unless something disturbed the call (a
fault, another engine's move, a claim held by another engine, a run suspended or finished).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

from weft_serverless.engine.engine import Engine
from weft_serverless.engine.ownership.base import unpack_epoch
from weft_serverless.engine.persistence.records import PENDING, RUNNING, WorkflowState
from weft_serverless.engine.persistence.run_head import holder_record
from weft_serverless.engine.process.timer_hints import TimerHint
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing.sim_operations import Drawn

PASS_CAP = 24  # due timers a maintenance pass reads here: small, so a backlog is cheap to make
FATES = ("deliver", "deliver", "duplicate", "drop", "early")
"""What happens to the hint a ``hint`` action takes: about two in five delivered at due, one
in five each duplicated, lost, or delivered before its due time."""
DELAYS = (0.0, 0.0, 0.05, 0.5)
"""Seconds after its due time a delivered hint arrives (a queue's delivery latency)."""


class HintStage(Protocol):
    """What the hint and share actions read and record of the world."""

    now: float
    store: Storage
    ownership: str
    flows: dict[str, Any]
    hints: list[TimerHint]
    workers: int
    hint_problems: dict[str, list[str]]

    def disturbances(self) -> int: ...

    def also(self, name: str, args: list[Any]) -> None: ...


class QueuedHints:
    """One engine incarnation's hint port: appends to the world's queue while it lives."""

    def __init__(self, queue: list[TimerHint], horizon: float, alive: Any) -> None:
        self.horizon = horizon
        self._queue = queue
        self._alive = alive  # a zero-argument callable: whether the incarnation still runs

    def send(self, hints: Sequence[TimerHint]) -> None:
        if self._alive():
            self._queue.extend(hints)


def draw_hint(rng: random.Random, drawn: Drawn) -> list[Any]:
    return [rng.randrange(1000), rng.choice(FATES), rng.choice(DELAYS)]


def run_hint(world: HintStage, engine: Engine, args: list[Any]) -> None:
    """Take one queued hint and carry out its fate on ``engine``."""
    if not world.hints:
        return
    pick, fate, delay = args
    index = int(pick) % len(world.hints)
    hint = world.hints[index]
    if fate != "duplicate":
        del world.hints[index]
    if fate == "drop":
        return
    skew = engine.runtime.clock() - world.now
    if fate != "early":
        world.now = max(world.now, hint.due - skew + float(delay))

    def wait(seconds: float) -> None:
        """The worker waits for a timer due within a second: time passes, unless the hint
        came early on purpose (then the hint goes back to the queue)."""
        if fate != "early":
            world.now += seconds

    clock = world.now + skew
    due = hint.sort < keys.timer_due_bound(clock)
    stored = world.store.get(hint.key) is not None
    free = _free_to_fire(world, engine, hint)
    queued = sum(1 for other in world.hints if other.key == hint.key)
    disturbed = world.disturbances()
    report = engine.fire_timer_hints([hint], wait=wait)  # raising (a fault, a refusal) ends it here
    if world.disturbances() != disturbed or not stored or not free or engine.runtime.closed:
        return  # disturbed, nothing to fire, not this engine's to fire, or it stopped itself
    still = world.store.get(hint.key) is not None
    if due and still:
        world.hint_problems.setdefault("hinted-timers-fire-at-once", []).append(
            f"{engine.runtime.engine_id}: hint for {hint.sort} delivered at {clock:.3f}, "
            f"due, and the timer is still stored after the call ({len(report.kept)} kept)"
        )
    waits = not due and still and hint.sort >= keys.timer_due_bound(world.now + skew)
    if waits and sum(1 for other in world.hints if other.key == hint.key) <= queued:
        world.hint_problems.setdefault("early-hints-are-sent-again", []).append(
            f"{engine.runtime.engine_id}: hint for {hint.sort} delivered early at "
            f"{clock:.3f} was not sent again"
        )


def _free_to_fire(world: HintStage, engine: Engine, hint: TimerHint) -> bool:
    """Whether nothing but the engine stands between the hint and its timer: the timer is a
    run's, the run is running or pending (not suspended, not finished) and of a type the
    engines have (not a flood's retired type), and no other engine holds its claim."""
    wf = hint.workflow_id
    data = world.store.get(keys.state_key(wf))
    state = WorkflowState.from_bytes(data) if data is not None else None
    if state is None or state.status not in (RUNNING, PENDING) or state.type not in world.flows:
        return False  # not a run's timer, a run suspended or finished, or a retired type's
    if world.ownership != "workflow-lease":
        return True
    # Where the store keeps the holder: its own item (layouts 1 and 2) or the run's head
    # (layout 3, ADR 0056).
    holder = holder_record(
        world.store.get(keys.owner_holder_key(wf)), world.store.get(keys.owner_head_key(wf))
    )
    claims: dict[str, Any] = getattr(engine.runtime.fence, "claims", {})
    claim = claims.get(wf)
    if claim is not None:
        # A claim this engine lists but the store no longer names (taken over and released,
        # or left apart by an ambiguous write): the wake drops it and drives nothing, since
        # the loss may hide an operator's move (a suspend and resume) the drive must not skip.
        return (
            holder is not None
            and holder.get("engine_id") == engine.runtime.engine_id
            and holder.get("epoch") == unpack_epoch(claim.epoch_bytes)
        )
    # A run another engine holds, its claim live or lapsed, is left to that engine or to the
    # takeover a later wake or pass makes once the claim has lapsed past its grace; nor does a
    # wake drive on a stored holder naming this engine that its registry does not hold.
    return holder is None


def draw_share(rng: random.Random, drawn: Drawn) -> list[Any]:
    """A worker index (taken modulo the seed's worker count), and whether another engine
    runs an overlapping share right after: the same share, or one of another worker count
    (a count changed mid-deployment), 0 for none."""
    return [rng.randrange(4), rng.choice([0, 0, 0, 1, 2, 3, 4])]


def run_share(world: HintStage, engine: Engine, args: list[Any]) -> None:
    worker, then = int(args[0]), int(args[1])
    workers = world.workers
    engine.run_maintenance(max_timers=PASS_CAP, worker=worker % workers, workers=workers)
    if then:
        world.also("share-of", [worker % then, then])


def run_share_of(world: HintStage, engine: Engine, args: list[Any]) -> None:
    """One pass of worker ``args[0]`` of ``args[1]`` (the second engine of a share pair,
    and the passes at quiescence)."""
    engine.run_maintenance(max_timers=PASS_CAP, worker=int(args[0]), workers=int(args[1]))
