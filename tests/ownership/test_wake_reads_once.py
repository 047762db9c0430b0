"""A wake that claims a free run reads its partition once (ADR 0058).

The wake read the owner items (a Query), the state (a Get), put the head, and the drive then
read the whole partition (a Query). The wake now reads the whole partition first, the state
after it, and hands the rows to the drive when its claim landed on the head it read with no
holder named: every commit of a run is fenced on a head naming its holder, so nothing was
committed between the read and the claim. After a takeover (a deposed holder may still commit
beside the head it read) and once the claim wrote anything, the drive reads again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ownership_support import (
    TAKEOVER,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    fencing_violations,
    make_engine,
    step_wait_step,
    stepping,
    timers_of,
)

from weft_serverless.engine.runs import signals
from weft_serverless.storage import keys
from weft_serverless.storage.base import SortRange, Storage
from weft_serverless.testing import DelegatingStorage, SimulatedCrash, VirtualClock

Gen = Iterator[Any]


def between(calls: Calls) -> dict[str, Any]:
    """A step, a sleep, a signal wait, a step."""
    return step_wait_step(calls, sleep=10)


class PartitionReads(DelegatingStorage):
    """Counts the reads of ``workflow_id``'s partition (whole, or ``owner#`` only) and runs
    ``hook`` once, right after the first whole read that ``armed`` allows."""

    def __init__(self, inner: Storage, workflow_id: str) -> None:
        super().__init__(inner)
        self.partition = keys.workflow_partition(workflow_id)
        self.whole = 0
        self.owner = 0
        self.hook: Callable[[], None] | None = None

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        rows = list(super()._scan(partition, rng, limit, reverse))
        if partition == self.partition:
            if rng.low is None and rng.high is None:
                self.whole += 1
                if self.hook is not None:
                    hook, self.hook = self.hook, None
                    hook()
            elif rng.low == "owner#":
                self.owner += 1
        return iter(rows)


def test_a_fired_sleep_reads_the_partition_once(storage_factory: Opener) -> None:
    """The pass that fires a released run's sleep reads its partition once and no owner
    items apart; the run then parks on its signal and ends as before."""
    clock, calls = VirtualClock(), Calls()
    counted = PartitionReads(storage_factory(), "w")
    engine = make_engine(lambda: counted, between(calls), "e1", clock)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    clock.advance(10)
    counted.whole = counted.owner = 0
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        report = engine.run_maintenance()
    assert report.timers_fired == 1
    assert (counted.whole, counted.owner) == (1, 0)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.signal("w", "go", 5)
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert timers_of(storage_factory(), "w") == []


def test_a_signal_buffered_between_the_read_and_the_claim_is_taken_later(
    storage_factory: Opener,
) -> None:
    """A signal lands after the wake read the partition and before its claim: the claim
    still lands (a signal does not move the head), the drive runs on the rows read without
    it and parks on the signal wait, and the signal's own timer wakes the run to take it."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    racing = PartitionReads(storage_factory(), "w")
    engine = make_engine(lambda: racing, flows, "e1", clock)
    sender = make_engine(storage_factory, flows, "sender", clock)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    clock.advance(10)
    racing.hook = lambda: signals.deliver(sender.runtime, "w", "go", 5, None)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.run_maintenance()
    assert racing.hook is None
    assert engine.describe("w").status == "running" and calls.count("b") == 0
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.run_maintenance()  # the signal's timer
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert timers_of(storage_factory(), "w") == []


def test_a_fire_racing_a_signal_on_the_parked_run_does_the_work_once(
    storage_factory: Opener,
) -> None:
    """The fire read the partition; before its claim, a signal is delivered by an engine
    that drives it inline and takes the run: the fire's claim is refused (the head moved),
    it reads nothing more of the run, and every step ran once, fenced."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    racing = PartitionReads(storage_factory(), "w")
    engine = make_engine(lambda: racing, flows, "e1", clock, journal=journal)
    sender = make_engine(storage_factory, flows, "sender", clock, journal=journal)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    clock.advance(10)

    def signal_inline() -> None:
        with sender.invocation(time_left=lambda: 60.0, heartbeat=False):
            sender.signal("w", "go", 5)

    racing.hook = signal_inline
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.run_maintenance()
    assert racing.hook is None
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []
    clock.advance(TAKEOVER)
    engine.run_maintenance()
    assert timers_of(storage_factory(), "w") == []


class DieAtFirstHeadPut(DelegatingStorage):
    """Dies right after ``armed`` turns true and the next conditional batch lands."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.armed = False

    def _conditional_batch(self, conditions: Any, ops: Any) -> bool:
        landed = super()._conditional_batch(conditions, ops)
        if self.armed:
            self.armed = False
            raise SimulatedCrash("died right after its claim landed")
        return landed


def test_after_a_takeover_the_drive_reads_the_partition_again(storage_factory: Opener) -> None:
    """A holder died right after its claim of the fire (written before the step the
    resumed code runs); once its claim expired, the wake that takes the run over reads the
    partition again for its drive (the deposed holder might have committed beside the head
    it read), and the run goes on once."""
    clock, calls = VirtualClock(), Calls()
    flows = stepping(calls)
    dying = DieAtFirstHeadPut(storage_factory())
    dead = make_engine(lambda: dying, flows, "dead", clock)
    with dead.invocation(time_left=lambda: 60.0, heartbeat=False):
        dead.start("flow", 1, id="w")
    clock.advance(10)
    dying.armed = True
    with contextlib.suppress(SimulatedCrash):
        dead.run_maintenance()
    counted = PartitionReads(storage_factory(), "w")
    survivor = make_engine(lambda: counted, flows, "survivor", clock, recover=False)
    clock.advance(TAKEOVER)
    survivor.run_maintenance()
    assert counted.whole == 2  # the wake's read, and the drive's after the takeover
    survivor.signal("w", "go", 5)
    assert survivor.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1


class HeadReads(DelegatingStorage):
    """Counts point reads of ``workflow_id``'s head; runs ``hook`` once, right after the
    first conditional batch that lands once ``armed``."""

    def __init__(self, inner: Storage, workflow_id: str) -> None:
        super().__init__(inner)
        self.head = keys.owner_head_key(workflow_id)
        self.reads = 0
        self.hook: Callable[[], None] | None = None

    def _get(self, key: Any) -> bytes | None:
        if key == self.head:
            self.reads += 1
        return super()._get(key)

    def _conditional_batch(self, conditions: Any, ops: Any) -> bool:
        landed = super()._conditional_batch(conditions, ops)
        if landed and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return landed


def test_a_start_drives_on_its_claim_without_reading_the_head_back(
    storage_factory: Opener,
) -> None:
    """The start's batch carries the claim; its drive reads the partition (the head with
    it) and no head apart, then parks, and the run goes on as before."""
    clock, calls = VirtualClock(), Calls()
    counted = HeadReads(storage_factory(), "w")
    engine = make_engine(lambda: counted, between(calls), "e1", clock)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    assert counted.reads == 0  # the wake read it back before (a GetItem), ADR 0058
    assert calls.count("a") == 1
    clock.advance(10)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.run_maintenance()
        engine.signal("w", "go", 5)
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1


def test_a_start_taken_over_before_its_drive_runs_nothing(storage_factory: Opener) -> None:
    """Between the start's batch and its drive, another engine takes the run over (its
    wake-up, once the claim expired) and drives it: the start's drive reads a head of
    another epoch and runs nothing, and every step ran once, fenced."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    # the hook runs outside the journal's record of the start batch (its lock is not shared)
    racing = HeadReads(RecordingStorage(storage_factory(), "starter", journal), "w")
    starter = make_engine(lambda: racing, flows, "starter", clock)
    other = make_engine(storage_factory, flows, "other", clock, journal=journal, recover=False)

    def taken_over() -> None:
        clock.advance(TAKEOVER)
        other.run_maintenance()

    racing.hook = taken_over
    with starter.invocation(time_left=lambda: 60.0, heartbeat=False):
        starter.start("flow", 1, id="w")
    assert racing.hook is None
    assert calls.count("a") == 1
    clock.advance(10)
    other.run_maintenance()
    other.signal("w", "go", 5)
    assert other.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []
