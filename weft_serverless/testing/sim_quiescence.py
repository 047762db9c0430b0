"""The end of every scenario: faults stop, every engine comes back, and time runs on.

Twelve rounds, 15 s apart (and one more for each round a flood's backlog takes to read,
``backlog_rounds``, so that runs whose timers wait behind it still get their rounds), in
which every engine runs a maintenance pass; the liveness
invariants judge what is left. A timer that stays due through ``LATE_PASSES`` rounds is
noted (``timers-fire-in-bounded-passes``), plus the rounds the passes need to read past a
backlog of timers no engine can fire (a flood's: ``PASS_CAP`` a pass, counted per share when
several workers split the shards, ``backlog_rounds``, which the checks of schedules and of
finished runs' timers allow too); the timers of a run
with a teardown get the teardown's claim on top (60 s): an engine that died running it holds
the run until then.

A seed with several maintenance workers (``Scenario.workers``) runs its rounds as that
deployment does: each round every share (worker ``i`` of ``W``) is one engine's, the engines
taking them in turn, and gets one pass per engine, back to back (so each shard is read as
often as full passes read it). So a timer in a shard no share reads stays due, and
``timers-fire-in-bounded-passes`` names it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from weft_serverless.engine.teardown import CLAIM_TTL
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.storage.keys.shards import Share
from weft_serverless.testing.sim_actions import FLOOD_PREFIX
from weft_serverless.testing.sim_hints import PASS_CAP


class World(Protocol):
    """What the end of a scenario moves and reads of the world."""

    faults_on: bool
    now: float
    store: Storage
    late_timers: list[str]
    backlog_rounds: int
    workers: int

    @property
    def slots(self) -> Sequence[Any]: ...

    def act(self, slot: Any, name: str, args: list[Any], *, scope: int) -> None: ...

    def engine(self, slot: Any) -> Any: ...


ROUNDS, STEP = 12, 15.0
LATE_PASSES = 3  # rounds of passes (every engine once) within which a due timer must fire
TEARDOWN_LATE = LATE_PASSES + math.ceil(CLAIM_TTL / STEP)


def quiesce(world: World) -> None:
    """Stop faults, bring every engine back and let time run on, maintaining on each;
    note every timer that stays due too long."""
    world.faults_on = False
    world.backlog_rounds = _backlog_rounds(world)
    late = LATE_PASSES + world.backlog_rounds
    overdue: dict[str, int] = {}
    for _ in range(ROUNDS + world.backlog_rounds):
        world.now += STEP
        for slot, name, args in _passes(world):
            world.act(_live(world, slot), name, args, scope=0)
        overdue = {sort: overdue.get(sort, 0) + 1 for sort in _timers(world, due=True)}
        for sort, rounds in overdue.items():
            if rounds == late + (TEARDOWN_LATE - LATE_PASSES if _tearing_down(world, sort) else 0):
                world.late_timers.append(sort)


def _backlog_rounds(world: World) -> int:
    """Rounds the passes need to read past the flood's backlog, ``PASS_CAP`` timers a pass.

    With one worker every engine's pass reads every shard, so the round's passes share the
    whole backlog. With several, a shard's timers are read only by the passes of the share
    that owns it: the share with the most backlog for the passes it gets sets the bound (a
    backlog piled in one share is read one pass a round, however many engines there are).
    """
    flooded = Counter(shard for shard, _ in _shard_timers(world, flooded=True))
    if world.workers <= 1:
        return math.ceil(sum(flooded.values()) / (PASS_CAP * len(world.slots)))
    passes = Counter(args[0] for _, _, args in _passes(world))
    return max(
        math.ceil(
            sum(
                count
                for shard, count in flooded.items()
                if Share(worker, world.workers).owns(shard)
            )
            / (PASS_CAP * turns)
        )
        for worker, turns in passes.items()
    )


def _passes(world: World) -> list[tuple[Any, str, list[Any]]]:
    """One round's passes: every engine's full pass, or with several workers every share's
    passes, the engines taking the shares in turn (an engine that cannot start passes its
    share on, ``_live``) and every engine running at least one.

    A share is one engine's each round, as a deployment's worker runs its own share: an
    engine holding a run whose timer another share reads must not fire it by running that
    share too (the defect ``found-share-keeps-parked-claims`` plants). Each share gets as many
    passes as there are engines, one after the other, as a deployed worker runs another pass
    at once when one read its cap: each shard is read as often a round as full passes read
    it, and a backlog piled in one share (a flood's, in the first shard) is not read at a
    fraction of that rate only because the shards were split."""
    slots, workers = list(world.slots), world.workers
    if workers <= 1:
        return [(slot, "maintain", []) for slot in slots]
    turns = max(len(slots), workers)
    return [
        (slots[n % len(slots)], "share-of", [n % workers, workers])
        for n in range(turns)
        for _ in slots
    ]


def _live(world: World, slot: Any) -> Any:
    """``slot``, or the next one whose engine runs: under ``lease`` only the lease's holder
    starts, and a share must not go unread because its engine could not."""
    slots = list(world.slots)
    start = slots.index(slot)
    for turn in range(len(slots)):
        other = slots[(start + turn) % len(slots)]
        if world.engine(other) is not None:
            return other
    return slot


def _tearing_down(world: World, sort: str) -> bool:
    wf = keys.dec(sort.split("#")[1])
    return world.store.get(keys.teardown_key(wf)) is not None


def _timers(world: World, *, due: bool = False, flooded: bool = False) -> Iterator[str]:
    """Timers (only the due ones, with ``due``) of runs that are not a flood's, or (with
    ``flooded``) only of a flood's (a flood waits for takeovers by design)."""
    return (sort for _, sort in _shard_timers(world, due=due, flooded=flooded))


def _shard_timers(
    world: World, *, due: bool = False, flooded: bool = False
) -> Iterator[tuple[int, str]]:
    """``_timers`` with the shard each is stored in."""
    bound = keys.timer_due_bound(world.now) if due else None
    for shard in range(keys.TIMER_SHARDS):
        for sort, _ in world.store.scan(keys.timer_partition(shard), lt=bound):
            if keys.dec(sort.split("#")[1]).startswith(FLOOD_PREFIX) == flooded:
                yield shard, sort
