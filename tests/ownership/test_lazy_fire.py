"""A fire with no step between its wait and the next claims nothing (layout 4, ADR 0059).

A wake that finds the run free drives it without writing a claim. The drive's first plain
step (the fired sleep's) stays in memory; if the code then reaches its next wait, one
conditional put of the head, on the bytes the wake read (no holder, nothing committed
since), carries that step and the next park, and leaves the holder free; the fired timer is
deleted after it. Anything else the drive writes or runs (a second step, an activity, a
transaction, the run's end) first writes today's claim. A refused put landed nothing.
"""

from __future__ import annotations

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
    epoch_of,
    fencing_violations,
    layout_3,
    make_engine,
    refused_step_writes,
    rewritten_op_records,
    step_wait_step,
    stepping,
    timers_of,
)

from weft_serverless import Engine, workflow
from weft_serverless.codec import decode
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.engine.persistence.stored_records import PendingRecord
from weft_serverless.engine.runs import signals
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put, Storage
from weft_serverless.testing import (
    CrashingStorage,
    DelegatingStorage,
    SimulatedCrash,
    VirtualClock,
)

# Where a batch is one commit however many items it holds (SQLite), the fire claims as before.
pytestmark = pytest.mark.backends("memory", "dynamodb", "dynamodb-http")

Gen = Iterator[Any]
SLEEP_SLOT = keys.step_slot(1)
WAIT_SLOT = keys.step_slot(2)


def between(calls: Calls) -> dict[str, Any]:
    """A step, a sleep, a signal wait, a step: the fired sleep reaches the wait at once."""
    return step_wait_step(calls, sleep=10)


def with_timeout(calls: Calls) -> dict[str, Any]:
    """As ``between``, the wait with a timeout: the fired sleep parks on its timer."""

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("a", x)
        yield ctx.sleep(10)
        g = yield ctx.wait_for_signal("go", timeout=100)
        z = yield ctx.run("b", y + (0 if g is None else g))
        return z

    return {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda x: x + 1), b=calls.recorder("b"))
        .execute(flow)
    }


def head_of(storage: Storage, workflow_id: str) -> Head:
    data = storage.get(keys.owner_head_key(workflow_id))
    assert data is not None
    return Head.from_bytes(data)


def head_puts(ops: Sequence[Op], workflow_id: str) -> list[Head]:
    key = keys.owner_head_key(workflow_id)
    return [Head.from_bytes(op.value) for op in ops if isinstance(op, Put) and op.key == key]


class BeforeHeadPut(DelegatingStorage):
    """Runs ``hook`` once, right before the first conditional batch that puts
    ``workflow_id``'s head (nothing when ``hook`` is None)."""

    def __init__(self, inner: Storage, workflow_id: str) -> None:
        super().__init__(inner)
        self.workflow_id = workflow_id
        self.hook: Callable[[], None] | None = None

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        if self.hook is not None and head_puts(ops, self.workflow_id):
            hook, self.hook = self.hook, None
            hook()
        return super()._conditional_batch(conditions, ops)


def invocation(engine: Engine, act: Callable[[], object]) -> None:
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        act()


def start_parked(opener: Opener, flows: Any, clock: VirtualClock, journal: Journal) -> int:
    """Start run ``w`` on engine ``e1``, which parks it on its sleep; returns its epoch."""
    starter = make_engine(opener, flows, "e1", clock, journal=journal)
    invocation(starter, lambda: starter.start("flow", 1, id="w"))
    return epoch_of(opener(), "w")


def fire_the_sleep(
    opener: Opener, flows: Any, clock: VirtualClock, journal: Journal
) -> tuple[Engine, list[Write]]:
    """Engine ``e2`` runs a pass once the sleep is due: the engine, and the writes the pass
    committed."""
    firing = make_engine(opener, flows, "e2", clock, journal=journal)
    mark = journal.mark()
    clock.advance(10)
    invocation(firing, firing.run_maintenance)
    return firing, [w for w in journal.since(mark) if w.committed]


def test_a_fire_with_no_step_between_is_one_put_of_the_head_then_the_timer_delete(
    storage_factory: Opener,
) -> None:
    """The pass writes the head once, on the bytes it read, on the same epoch, with no
    holder, carrying the sleep's step; then deletes the fired timer. No claim, no release,
    no write-out."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    start_parked(storage_factory, flows, clock, journal)
    store = storage_factory()
    before = head_of(store, "w")
    assert before.holder is None and before.park() is not None
    firing, writes = fire_the_sleep(storage_factory, flows, clock, journal)
    put, delete = writes  # nothing else
    assert [c.key for c in put.conditions] == [keys.owner_head_key("w")]
    assert put.conditions[0].expected == before.to_bytes()
    (after,) = head_puts(put.ops, "w")
    assert len(put.ops) == 1
    assert after.epoch == before.epoch and after.holder is None
    assert after.slot == SLEEP_SLOT and after.park() is None  # the sleep is done
    assert delete.conditions == () and all(isinstance(op, Delete) for op in delete.ops)
    assert timers_of(store, "w") == []
    assert firing.runtime.metrics.counters.get("claim_attempts.acquired", 0) == 0
    invocation(firing, lambda: firing.signal("w", "go", 5))
    assert firing.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_a_fire_that_parks_again_carries_the_step_and_the_park_in_one_put(
    storage_factory: Opener,
) -> None:
    """The resumed code reaches a wait with a timeout: the timeout's timer is put alone,
    then one head put carries the sleep's step and the new park, holder free; the run then
    takes its signal as before."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = with_timeout(calls)
    epoch = start_parked(storage_factory, flows, clock, journal)
    firing, writes = fire_the_sleep(storage_factory, flows, clock, journal)
    heads = [h for w in writes for h in head_puts(w.ops, "w")]
    assert len(heads) == 1  # no claim, no release
    (after,) = heads
    parked = after.park()
    assert after.epoch == epoch and after.holder is None and after.slot == SLEEP_SLOT
    assert parked is not None and parked[0] == WAIT_SLOT
    due = PendingRecord.from_map(decode(parked[1])).due
    assert due == clock() + 100
    assert len(writes) == 3  # the timeout's timer, the head, the fired timer's delete
    assert writes[0].conditions == () and len(writes[0].ops) == 1
    invocation(firing, lambda: firing.signal("w", "go", 5))
    assert firing.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_a_fire_whose_code_runs_a_step_claims_first(storage_factory: Opener) -> None:
    """The resumed code runs an activity after the sleep: the claim (epoch + 1, this
    engine the holder) lands before the sleep's step and before the activity runs, as
    before; released at the invocation's end."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    holders: list[str | None] = []

    def b(y: int) -> int:  # who the stored head names while the activity runs
        head = head_of(storage_factory(), "w")
        holders.append(None if head.holder is None else head.holder.engine_id)
        return y

    flows = stepping(calls)
    definition = flows["flow"]
    flows = {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda x: x + 1), b=calls.recorder("b", b))
        .execute(definition.fn)
    }
    epoch = start_parked(storage_factory, flows, clock, journal)
    firing, writes = fire_the_sleep(storage_factory, flows, clock, journal)
    assert holders == ["e2"]  # the claim landed before the side effect ran
    heads = [h for w in writes for h in head_puts(w.ops, "w")]
    claim, step = heads[0], heads[1]
    assert claim.epoch == epoch + 1 and claim.holder is not None
    assert claim.holder.engine_id == "e2" and claim.slot != SLEEP_SLOT
    assert step.slot == SLEEP_SLOT and step.holder is not None
    assert calls.count("b") == 1
    assert head_of(storage_factory(), "w").holder is None
    invocation(firing, lambda: firing.signal("w", "go", 5))
    assert firing.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}


def test_a_crash_at_every_write_of_the_fire_loses_and_doubles_nothing(
    storage_factory: Opener,
) -> None:
    """The pass dies before, then after, each of its writes (the head put, the fired
    timer's delete); another engine finishes each run: the right result, every step once,
    no write that breaks the fence."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    counting = CrashingStorage(storage_factory())
    engine = make_engine(lambda: counting, flows, "count", clock)
    invocation(engine, lambda: engine.start("flow", 1, id="count"))
    clock.advance(10)
    written = counting.writes
    invocation(engine, engine.run_maintenance)
    total = counting.writes - written
    assert total == 2
    invocation(engine, lambda: engine.signal("count", "go", 5))
    assert engine.get_handle("count").result() == 7
    runs = 1
    for when in ("before", "after"):
        for n in range(1, total + 1):
            run = f"{when}-{n}"
            starter = make_engine(storage_factory, flows, f"start-{run}", clock, journal=journal)
            invocation(starter, lambda r=run, s=starter: s.start("flow", 1, id=r))  # type: ignore[misc]
            crashing = CrashingStorage(RecordingStorage(storage_factory(), run, journal))
            dying = make_engine(lambda c=crashing: c, flows, run, clock)  # type: ignore[misc]
            setattr(crashing, f"crash_{when}_write", crashing.writes + n)
            clock.advance(10)
            with pytest.raises(SimulatedCrash):
                invocation(dying, dying.run_maintenance)
            survivor = make_engine(
                storage_factory, flows, f"survivor-{run}", clock, journal=journal
            )
            clock.advance(TAKEOVER)
            invocation(survivor, survivor.run_maintenance)
            invocation(survivor, lambda r=run, s=survivor: s.signal(r, "go", 5))  # type: ignore[misc]
            clock.advance(TAKEOVER)
            invocation(survivor, survivor.run_maintenance)
            assert survivor.get_handle(run).result() == 7, run
            assert head_of(storage_factory(), run).holder is None, run
            assert timers_of(storage_factory(), run) == [], run
            runs += 1
    assert calls.count("a") == runs and calls.count("b") == runs
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}


def test_a_signal_landing_between_the_read_and_the_put_is_taken(
    storage_factory: Opener,
) -> None:
    """A signal is delivered (not driven) after the fire read the run and before its head
    put: the put still lands (a signal does not move the head), the drive parked on the
    wait without it, and the signal's own timer wakes the run, which takes it."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    hooked = BeforeHeadPut(storage_factory(), "w")
    engine = make_engine(lambda: hooked, flows, "e1", clock)
    sender = make_engine(storage_factory, flows, "sender", clock)
    invocation(engine, lambda: engine.start("flow", 1, id="w"))
    clock.advance(10)
    hooked.hook = lambda: signals.deliver(sender.runtime, "w", "go", 5, None)
    invocation(engine, engine.run_maintenance)
    assert hooked.hook is None
    head = head_of(storage_factory(), "w")
    assert head.slot == SLEEP_SLOT and head.holder is None
    assert engine.describe("w").status == "running" and calls.count("b") == 0
    invocation(engine, engine.run_maintenance)  # the signal's timer
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert timers_of(storage_factory(), "w") == []


def test_two_engines_firing_the_same_timer_record_the_step_once(
    storage_factory: Opener,
) -> None:
    """Both read the free head; one's put lands while the other's is on its way: the
    other's is refused, it reads again and finds the sleep done, and writes nothing."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    starter = make_engine(storage_factory, flows, "e0", clock, journal=journal)
    invocation(starter, lambda: starter.start("flow", 1, id="w"))
    a = make_engine(storage_factory, flows, "a", clock, journal=journal, recover=False)
    hooked = BeforeHeadPut(RecordingStorage(storage_factory(), "b", journal), "w")
    b = make_engine(lambda: hooked, flows, "b", clock, recover=False)
    clock.advance(10)
    hooked.hook = lambda: invocation(a, a.run_maintenance)
    invocation(b, b.run_maintenance)
    assert hooked.hook is None
    landed = [w for w in journal.by("a", committed=True) if head_puts(w.ops, "w")]
    assert len(landed) == 1
    assert len(refused_step_writes(journal, "b", "w")) == 1
    assert [w for w in journal.by("b", committed=True) if head_puts(w.ops, "w")] == []
    assert rewritten_op_records(journal) == {}
    assert fencing_violations(journal) == []
    assert timers_of(storage_factory(), "w") == []
    invocation(a, lambda: a.signal("w", "go", 5))
    assert a.get_handle("w").result() == 7
    assert calls.count("a") == 1 and calls.count("b") == 1


def test_a_claim_landing_between_the_read_and_the_put_refuses_the_put(
    storage_factory: Opener,
) -> None:
    """Another engine takes the run (a signal sent through it, driven inline, claims it and
    runs it to its end) after the fire read it: the fire's put is refused, nothing of its
    drive lands, its timer is left to the run's owner, and every step ran once."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    starter = make_engine(storage_factory, flows, "e0", clock, journal=journal)
    invocation(starter, lambda: starter.start("flow", 1, id="w"))
    api = make_engine(storage_factory, flows, "api", clock, journal=journal, recover=False)
    hooked = BeforeHeadPut(RecordingStorage(storage_factory(), "fire", journal), "w")
    fire = make_engine(lambda: hooked, flows, "fire", clock, recover=False)
    clock.advance(10)
    hooked.hook = lambda: invocation(api, lambda: api.signal("w", "go", 5))
    invocation(fire, fire.run_maintenance)
    assert hooked.hook is None
    assert api.get_handle("w").result() == 7
    assert [w for w in journal.by("fire", committed=True) if head_puts(w.ops, "w")] == []
    assert len(refused_step_writes(journal, "fire", "w")) == 1
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}
    clock.advance(TAKEOVER)
    invocation(fire, fire.run_maintenance)  # the timer left behind finds the run ended
    assert timers_of(storage_factory(), "w") == []
    assert calls.count("a") == 1 and calls.count("b") == 1


def test_a_store_of_layout_3_fires_on_a_claim_as_before(storage_factory: Opener) -> None:
    """Stores keep the protocol they were set up with: on ``workflow-lease@3`` the fire
    claims (epoch + 1), commits the sleep's step, and releases."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    opener = layout_3(storage_factory)
    flows = between(calls)
    epoch = start_parked(opener, flows, clock, journal)
    firing, writes = fire_the_sleep(opener, flows, clock, journal)
    heads = [h for w in writes for h in head_puts(w.ops, "w")]
    assert len(heads) == 3  # the claim, the sleep's step, the release
    assert heads[0].epoch == epoch + 1 and heads[0].holder is not None
    assert heads[-1].holder is None
    invocation(firing, lambda: firing.signal("w", "go", 5))
    assert firing.get_handle("w").result() == 7
