"""Layout 4 (``workflow-lease@4``, ADR 0058): a run parks its top-level step in its head.

The park was a transaction (the pending item, the step's timer, the wake-up's deletes and a
check of the head: every item billed twice). It is now a plain put of the timer, then one
conditional put of the head carrying the pending record, then a plain delete of the run's
wake-up. A timer whose park never landed fires and finds nothing to do (ADR 0002); a park
that landed keeps the run asleep until its own due time, whoever wakes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from ownership_support import (
    TAKEOVER,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    Write,
    fencing_violations,
    holder_of,
    layout_3,
    make_engine,
    step_wait_step,
    timers_of,
)

from weft_serverless import workflow
from weft_serverless.codec import decode
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.engine.persistence.stored_records import PendingRecord
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, Storage
from weft_serverless.testing import (
    DelegatingStorage,
    SimulatedCrash,
    VirtualClock,
)

# Where a batch is one commit however many items it holds (SQLite), the park stays one batch.
pytestmark = pytest.mark.backends("memory", "dynamodb", "dynamodb-http")

Gen = Iterator[Any]
SLEEP_SLOT = keys.step_slot(1)


def between(calls: Calls) -> dict[str, Any]:
    """A step, a sleep, a signal wait, a step."""
    return step_wait_step(calls, sleep=10)


def with_timeout(calls: Calls) -> dict[str, Any]:
    """A signal wait with a timeout: the timeout is the park."""

    def flow(ctx: Any, x: int) -> Gen:
        g = yield ctx.wait_for_signal("go", timeout=100)
        z = yield ctx.run("b", x if g is None else g)
        return z

    return {"flow": workflow("flow").activities(b=calls.recorder("b")).execute(flow)}


def head_of(storage: Storage, workflow_id: str) -> Head:
    data = storage.get(keys.owner_head_key(workflow_id))
    assert data is not None
    return Head.from_bytes(data)


def pending_items(storage: Storage, workflow_id: str) -> list[str]:
    partition = keys.workflow_partition(workflow_id)
    return [sort for sort, _ in storage.scan(partition, keys.PENDING_PREFIX)]


def parks(ops: Sequence[Op], workflow_id: str) -> bool:
    """Whether a write puts the run's head with a park in it."""
    head = keys.owner_head_key(workflow_id)
    return any(
        isinstance(op, Put) and op.key == head and Head.from_bytes(op.value).park() is not None
        for op in ops
    )


class DieBeforePark(DelegatingStorage):
    """Runs ``hook`` once, instead of or before the first conditional batch that parks
    ``workflow_id`` in its head; by default the process dies there."""

    def __init__(self, inner: Storage, workflow_id: str) -> None:
        super().__init__(inner)
        self.workflow_id = workflow_id
        self.hook: Callable[[], None] | None = self.die

    @staticmethod
    def die() -> None:
        raise SimulatedCrash("died between the park's timer and its head")

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        if self.hook is not None and parks(ops, self.workflow_id):
            hook, self.hook = self.hook, None
            hook()
        return super()._conditional_batch(conditions, ops)


def test_a_park_is_a_timer_put_and_one_put_of_the_head(storage_factory: Opener) -> None:
    """No transaction and no pending item: the sleep's timer is put alone and unconditioned,
    then the head (on the bytes the claim wrote) carries the pending record, then the
    wake-up goes; the sleep fires at its due time and its step ends the park."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    engine = make_engine(storage_factory, between(calls), "e1", clock, journal=journal)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    store = storage_factory()
    head = head_of(store, "w")
    parked = head.park()
    assert parked is not None and parked[0] == SLEEP_SLOT
    pending = PendingRecord.from_map(decode(parked[1]))
    assert pending.due == clock() + 10 and pending.timer is not None
    assert pending_items(store, "w") == []
    park_at = next(i for i, w in enumerate(journal.writes) if parks(w.ops, "w"))
    park = journal.writes[park_at]
    assert park.committed and [op.key for op in park.ops] == [keys.owner_head_key("w")]
    assert [c.key for c in park.conditions] == [keys.owner_head_key("w")]
    timer = next(
        w
        for w in journal.writes
        if any([op.key.partition, op.key.sort] == pending.timer for op in w.ops)
    )
    assert timer.seq < park.seq and timer.conditions == () and len(timer.ops) == 1
    disarm = journal.writes[park_at + 1]
    assert disarm.conditions == () and keys.wake_key("w") in {op.key for op in disarm.ops}
    assert store.get(keys.wake_key("w")) is None
    # from the timer on, every write is a single item, or plain deletes
    assert all(len(w.ops) + len(w.conditions) <= 2 for w in journal.since(timer.seq))
    clock.advance(9)
    engine.run_maintenance()
    assert engine.describe("w").status == "running" and calls.count("b") == 0
    assert head_of(store, "w").park() is not None  # not due: still parked
    clock.advance(1)
    engine.run_maintenance()  # fires the sleep; the run waits on its signal
    assert head_of(store, "w").park() is None
    engine.signal("w", "go", 5)
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert timers_of(store, "w") == []


def test_an_orphan_timer_fires_and_finds_nothing(storage_factory: Opener) -> None:
    """The engine dies after the sleep's timer landed and before the head that parks on it:
    the timer fires at its due time and finds no park, so the sleep is not over; the run is
    taken over (its wake-up) and sleeps its full ten seconds from there, once."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    dying = DieBeforePark(storage_factory(), "w")
    engine = make_engine(lambda: dying, flows, "dead", clock)
    with contextlib.suppress(SimulatedCrash):
        engine.start("flow", 1, id="w")
    store = storage_factory()
    assert head_of(store, "w").park() is None and len(timers_of(store, "w")) == 2
    survivor = make_engine(storage_factory, flows, "survivor", clock)
    clock.advance(10)
    survivor.run_maintenance()  # the orphan is due; the dead holder's claim is not expired
    assert survivor.describe("w").status == "running"
    assert keys.op_key("w", SLEEP_SLOT).sort not in {
        sort for sort, _ in store.scan(keys.workflow_partition("w"), keys.OP_PREFIX)
    }
    clock.advance(TAKEOVER)
    survivor.run_maintenance()  # the wake-up: taken over, the run parks on a sleep of its own
    parked = head_of(store, "w").park()
    assert parked is not None
    due = PendingRecord.from_map(decode(parked[1])).due
    assert due == clock() + 10
    clock.advance(9)
    survivor.run_maintenance()
    assert head_of(store, "w").park() is not None  # its own due time, not the orphan's
    clock.advance(1)
    survivor.run_maintenance()
    survivor.signal("w", "go", 5)
    assert survivor.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert timers_of(store, "w") == []


def test_a_deposed_owners_park_lands_nothing_that_counts(storage_factory: Opener) -> None:
    """The owner stalls right before its park; another engine takes the run over and parks
    it. The stalled owner's timer lands (a timer only wakes), its head put is refused, and
    the run keeps its new owner's park."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    stalled_store = DieBeforePark(RecordingStorage(storage_factory(), "stalled", journal), "w")
    successor = make_engine(
        storage_factory, flows, "successor", clock, journal=journal, recover=False
    )

    def deposed() -> None:  # while the stalled owner waits, the successor takes over
        clock.advance(TAKEOVER)
        successor.run_maintenance()

    stalled_store.hook = deposed
    stalled = make_engine(lambda: stalled_store, flows, "stalled", clock)
    with contextlib.suppress(Exception):
        stalled.start("flow", 1, id="w")
    store = storage_factory()
    assert holder_of(store, "w") is None or holder_of(store, "w")["engine_id"] == "successor"  # type: ignore[index]
    refused = [w for w in journal.by("stalled") if parks(w.ops, "w")]
    assert len(refused) == 1 and not refused[0].committed
    parked = head_of(store, "w").park()
    assert parked is not None
    clock.advance(10)
    successor.run_maintenance()
    successor.signal("w", "go", 5)
    assert successor.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_a_signal_racing_the_park_is_taken_by_the_wait(storage_factory: Opener) -> None:
    """A signal lands between the timeout's timer and the head that parks on it: the park
    still lands (a signal does not move the head), and the signal's own timer wakes the run,
    which takes the signal, not the timeout."""
    clock, calls = VirtualClock(), Calls()
    flows = with_timeout(calls)
    racing = DieBeforePark(storage_factory(), "w")
    sender = make_engine(storage_factory, flows, "sender", clock)
    racing.hook = lambda: sender.signal("w", "go", 42)
    engine = make_engine(lambda: racing, flows, "e1", clock)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    assert racing.hook is None  # the signal landed between the timer and the head
    assert head_of(storage_factory(), "w").park() is not None
    clock.advance(1)
    engine.run_maintenance()
    assert engine.get_handle("w").result() == 42
    assert calls.count("b") == 1
    clock.advance(200)
    engine.run_maintenance()  # the timeout's timer, if any is left, finds nothing to do
    assert engine.get_handle("w").result() == 42 and calls.count("b") == 1
    assert timers_of(storage_factory(), "w") == []


def pending_write(journal: Journal) -> Write:
    """The write that put a pending item: the park, on a store that keeps it apart from the
    head."""
    return next(
        w
        for w in journal.writes
        if any(op.key.sort.startswith(keys.PENDING_PREFIX) for op in w.ops)
    )


def test_a_store_of_layout_3_parks_in_a_transaction_as_before(storage_factory: Opener) -> None:
    """Stores keep the protocol they were set up with: on ``workflow-lease@3`` the park is
    the pending item, its timer and the head check in one batch, and the head carries none."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    opener = layout_3(storage_factory)
    engine = make_engine(opener, between(calls), "e1", clock, journal=journal)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    store = storage_factory()
    assert head_of(store, "w").park() is None
    assert pending_items(store, "w") == [keys.PENDING_PREFIX + SLEEP_SLOT]
    park = pending_write(journal)
    assert park.committed and park.condition_on(keys.owner_head_key("w")) is not None
    clock.advance(10)
    engine.run_maintenance()
    engine.signal("w", "go", 5)
    assert engine.get_handle("w").result() == 7


@pytest.mark.backends("sqlite")
def test_on_sqlite_a_park_stays_one_batch(storage_factory: Opener) -> None:
    """One commit however many items: the park is the pending item, its timer and the
    wake-up's deletes in one batch, as on layout 3 (three separate writes would cost three)."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    engine = make_engine(storage_factory, between(calls), "e1", clock, journal=journal)
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
    store = storage_factory()
    assert head_of(store, "w").park() is None
    assert pending_items(store, "w") == [keys.PENDING_PREFIX + SLEEP_SLOT]
    park = pending_write(journal)
    assert park.committed and keys.wake_key("w") in {op.key for op in park.ops}
    clock.advance(10)
    engine.run_maintenance()
    engine.signal("w", "go", 5)
    assert engine.get_handle("w").result() == 7
