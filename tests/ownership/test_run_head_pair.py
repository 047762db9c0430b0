"""A step's write-out sent beside the head put that carries it too (ADR 0057): the head's
two inline records, crashes at every write in both orders of landing, a deposed owner's late
write-out, a retry's tombstone against the second record, and a takeover of a head that
carries two steps.

The order in which the two requests land is fixed by ``OrderedOverlap`` (the engine's
threads would leave it to chance): ``"head"`` runs a write-out only when the engine waits
for it, after the head put beside it landed; ``"write-out"`` runs it as it is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any, Literal

import pytest
from fault_support import FlakyStorage
from ownership_support import (
    GRACE,
    TTL,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    fencing_violations,
    is_write_out,
    rewritten_op_records,
    step_commits,
)
from test_run_head import engine_on, three_steps

from weft_serverless import Engine
from weft_serverless.codec import decode
from weft_serverless.engine.ownership.in_flight import Overlap
from weft_serverless.engine.ownership.workflow_lease import WorkflowLease
from weft_serverless.engine.persistence.records import load_history
from weft_serverless.engine.persistence.run_head import Head, settle, tombstone
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.persistence.wakeups import WAKE_GRACE
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import CrashingStorage, SimulatedCrash, VirtualClock

pytestmark = pytest.mark.backends("memory", "dynamodb")  # SQLite folds the write-out in

Gen = Generator[Any, Any, Any]
Order = Literal["head", "write-out"]


class _Deferred(Future[None]):
    """A write-out that runs when it is waited for: after the head put sent beside it."""

    def __init__(self, job: Callable[[], None], before: Callable[[], None]) -> None:
        super().__init__()
        self.job, self.before = job, before

    def result(self, timeout: float | None = None) -> None:
        if not self.done():
            try:
                self.before()
                self.job()
            except BaseException as error:
                self.set_exception(error)
            else:
                self.set_result(None)
        return super().result(timeout)


class OrderedOverlap(Overlap):
    """Sends write-outs in a fixed order against the head put beside them; ``before`` runs
    once, just before the first write-out deferred to a wait (another engine acts then)."""

    def __init__(self, first: Order, before: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.first, self.hook = first, before

    def send(self, job: Callable[[], None]) -> Future[None]:
        if self.first == "write-out":
            done: Future[None] = Future()
            try:
                job()  # a crash here (not an Exception) is the owner's own thread dying
            except Exception as error:
                done.set_exception(error)
            else:
                done.set_result(None)
            return done
        return _Deferred(job, self._once)

    def _once(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


TAKEOVER = max(TTL + GRACE, WAKE_GRACE) + 1
"""How long a survivor waits to take a crashed drive over: its claim expired (and its grace
passed), and, on a store that keeps the holder in the head (ADR 0056), the wake-up its run's
start armed has fallen due, since that timer is what brings the takeover."""


def pair_engine(
    storage: Storage, flows: dict[str, Any], engine_id: str, clock: VirtualClock, first: Order
) -> Engine:
    engine = engine_on(storage, flows, engine_id, clock)
    fence = engine.runtime.fence
    assert isinstance(fence, WorkflowLease)
    fence.overlap = OrderedOverlap(first)
    return engine


@pytest.mark.parametrize("first", ["head", "write-out"])
def test_a_small_step_rides_in_the_next_head_beside_its_write_out(
    storage_factory: Opener, first: Order
) -> None:
    """Where requests overlap, the head put of each small step after the first carries the
    step before it too (``s2``, ``r2``), so it need not wait for that step's write-out: each
    step is one head put and one write-out, no transaction, every step written out once."""
    clock, journal = VirtualClock(), Journal()
    storage = RecordingStorage(storage_factory(), "e1", journal)
    engine = pair_engine(storage, three_steps(Calls()), "e1", clock, first)
    assert engine.start("flow", 1, id="w").result() == 4
    heads = [Head.from_bytes(w.ops[0].value) for w in journal.writes if step_commits(w)]  # type: ignore[union-attr]
    slots = [keys.step_slot(n) for n in range(3)]
    assert [(h.slot, h.prior_slot) for h in heads] == [
        (slots[0], None),
        (slots[1], slots[0]),
        (slots[2], slots[1]),
    ]
    outs = [w.ops[0].key.sort for w in journal.writes if is_write_out(w)]
    assert outs == [keys.OP_PREFIX + slot for slot in slots]
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_a_700_byte_step_does_not_ride_in_the_next_head(storage_factory: Opener) -> None:
    """Two 700-byte records do not fit in one write unit: the head carries one, and the
    write-out lands before the next head put, as before (a step stays at 2 write units)."""
    clock, journal = VirtualClock(), Journal()
    storage = RecordingStorage(storage_factory(), "e1", journal)
    engine = pair_engine(storage, three_steps(Calls(), pad=600), "e1", clock, "head")
    assert engine.start("flow", 1, id="w").result() == 4
    heads = [w for w in journal.writes if step_commits(w)]
    assert all(Head.from_bytes(w.ops[0].value).prior_slot is None for w in heads)  # type: ignore[union-attr]
    second = journal.writes.index(heads[1])
    assert is_write_out(journal.writes[second - 1])
    assert fencing_violations(journal) == []


def _writes_of_one_run(storage_factory: Opener, first: Order) -> int:
    crashing = CrashingStorage(storage_factory())
    engine = pair_engine(crashing, three_steps(Calls()), "probe", VirtualClock(), first)
    before = crashing.writes
    assert engine.start("flow", 1, id="probe").result() == 4
    return crashing.writes - before


@pytest.mark.parametrize("first", ["head", "write-out"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_every_write_of_a_paired_run_loses_and_doubles_no_step(
    storage_factory: Opener, when: str, first: Order
) -> None:
    """The owner dies before (or right after) each of its writes in turn, with the write-out
    landing before the head put beside it or after it. Crashed between a head put and the
    write-out beside it, the head carries both unwritten steps: another engine takes the run
    over, writes both out, and completes it; every step committed once, none run twice past
    the crash, no write breaks the fence."""
    count = _writes_of_one_run(storage_factory, first)
    assert count >= 7  # start, 3 heads, 3 write-outs, the end
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = three_steps(calls)
    survivor = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)
    for n in range(1, count + 1):
        crashing = CrashingStorage(RecordingStorage(storage_factory(), f"e1-{n}", journal))
        owner = pair_engine(crashing, flows, f"e1-{n}", clock, first)
        setattr(crashing, f"crash_{when}_write", crashing.writes + n)
        with pytest.raises(SimulatedCrash):
            owner.start("flow", 1, id=f"w{n}")
    clock.advance(TAKEOVER)
    survivor.run_maintenance()
    for n in range(1, count + 1):
        if (when, n) == ("before", 1):
            continue  # the start never landed
        assert survivor.get_handle(f"w{n}").result() == 4, n
        history = load_history(storage_factory(), f"w{n}")
        assert history is not None and sorted(history.ops) == [keys.step_slot(i) for i in range(3)]
        stored = dict(storage_factory().scan(keys.workflow_partition(f"w{n}"), keys.OP_PREFIX))
        assert len(stored) == 3, n  # the end wrote every step out
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}


def test_a_takeover_of_a_head_carrying_two_steps_writes_both_out(
    storage_factory: Opener,
) -> None:
    """The owner dies right after the head put that carries steps a and b, before the
    write-out of a beside it: neither is in its own item. The next owner reads both from the
    head, runs neither again, writes both out, and completes the run."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = three_steps(calls)
    crashing = CrashingStorage(RecordingStorage(storage_factory(), "e1", journal))
    owner = pair_engine(crashing, flows, "e1", clock, "head")
    # start (1), head a (2), head b carrying a (3): a's write-out waits for the head
    crashing.crash_after_write = crashing.writes + 3
    with pytest.raises(SimulatedCrash):
        owner.start("flow", 1, id="w")
    history = load_history(storage_factory(), "w")
    assert history is not None and history.head is not None
    head = Head.from_bytes(history.head)
    assert (head.prior_slot, head.slot) == (keys.step_slot(0), keys.step_slot(1))
    assert [step.slot for step in history.unwritten] == [keys.step_slot(0), keys.step_slot(1)]
    assert sorted(history.ops) == [keys.step_slot(0), keys.step_slot(1)]
    clock.advance(TAKEOVER)
    survivor = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)
    survivor.run_maintenance()
    assert survivor.get_handle("w").result() == 4
    assert [calls.count(name) for name in ("a", "b", "c")] == [1, 1, 1]
    stored = dict(storage_factory().scan(keys.workflow_partition("w"), keys.OP_PREFIX))
    assert sorted(stored) == [keys.OP_PREFIX + keys.step_slot(n) for n in range(3)]
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


@pytest.mark.parametrize("new_owner_wrote_it_out", [True, False])
def test_a_deposed_owners_late_write_out_beside_its_head_lands_nothing_new(
    storage_factory: Opener, new_owner_wrote_it_out: bool
) -> None:
    """e1's head put carrying steps a and b lands; before its write-out of a does, e1 stalls
    past its claim and e2 takes the run over (and finishes it, or only claims it). e1's late
    write-out then finds a's slot holding the same bytes (refused, read back: done) or
    empty (it lands the committed bytes); its next write is refused either way. No step runs
    twice, none is committed twice, no write breaks the fence."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = three_steps(calls)
    e2 = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)

    def meanwhile() -> None:
        clock.advance(TAKEOVER)
        if new_owner_wrote_it_out:
            e2.run_maintenance()
            assert e2.get_handle("w").result() == 4
        else:
            fence = e2.runtime.fence
            assert isinstance(fence, WorkflowLease) and fence._take_over("w", clock())

    e1 = engine_on(RecordingStorage(storage_factory(), "e1", journal), flows, "e1", clock)
    fence = e1.runtime.fence
    assert isinstance(fence, WorkflowLease)
    fence.overlap = OrderedOverlap("head", before=meanwhile)
    e1.start("flow", 1, id="w")  # deposed at its next write: returns without raising
    if not new_owner_wrote_it_out:
        e2._session.wake("w", "reclaim")  # e2 now drives the run it took over
    assert e2.get_handle("w").result() == 4
    assert [calls.count(name) for name in ("a", "b")] == [1, 1]
    history = load_history(storage_factory(), "w")
    assert history is not None and sorted(history.ops) == [keys.step_slot(n) for n in range(3)]
    late = [w for w in journal.by("e1") if is_write_out(w)]
    assert late and late[0].ops[0].key == keys.op_key("w", keys.step_slot(0))
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def _record(value: int, epoch: int) -> bytes:
    return OpRecord(signature="run:a", at=1.0, value=bytes([value]), fence_epoch=epoch).to_bytes()


@pytest.mark.backends("memory")
@pytest.mark.parametrize("retried_at", [2, 1])
def test_a_retrys_tombstone_outranks_the_heads_second_record_of_an_older_epoch(
    retried_at: int,
) -> None:
    """The reader rule holds for the second inline record as for the first: a tombstone of
    a later epoch in its slot drops it (a retry forgot that step after the head carried it);
    a tombstone of the same epoch (written before the step was committed again) does not.
    The newest record is counted either way."""
    older, newer = keys.step_slot(0), keys.step_slot(1)
    prior, record = _record(1, 1), _record(2, 1)
    head = Head(1, 1, newer, record, older, prior).to_bytes()
    grave = tombstone(retried_at)
    ops = {older: OpRecord.from_map(decode(grave))}
    replayed = {keys.OP_PREFIX + older: grave}
    void, unwritten = settle(head, ops, replayed)
    assert void == {older: grave}
    if retried_at > 1:
        assert older not in ops and [step.slot for step in unwritten] == [newer]
    else:
        assert ops[older].to_bytes() == prior
        assert [(step.slot, step.expected) for step in unwritten] == [(older, grave), (newer, None)]
    assert ops[newer].to_bytes() == record


@pytest.mark.backends("memory")
def test_a_head_written_before_the_second_record_reads_as_it_did() -> None:
    """A head of one inline step (every head written before ADR 0057) has no ``s2``/``r2``:
    it decodes with no prior step, and its bytes are the same as before."""
    record = _record(1, 3)
    head = Head(3, 1, keys.step_slot(0), record)
    assert decode(head.to_bytes()) == {"e": 3, "f": 1, "s": keys.step_slot(0), "r": record}
    assert Head.from_bytes(head.to_bytes()).prior_slot is None
    assert Head.from_bytes(head.to_bytes()).inline() == [(keys.step_slot(0), record)]


@pytest.mark.parametrize("first", ["head", "write-out"])
def test_a_write_out_that_fails_beside_the_head_put_is_sent_again_before_the_next_step(
    storage_factory: Opener, first: Order
) -> None:
    """The write-out of step a fails with a transient error (nothing applied) while the head
    put beside it lands: the step is not over until the write-out is sent again and lands,
    so the next head, which no longer carries a, never leaves it in no item."""
    flaky = FlakyStorage(storage_factory())
    written_out = keys.op_key("w", keys.step_slot(0))
    flaky.fail_once(lambda ops: len(ops) == 1 and ops[0].key == written_out)
    engine = pair_engine(flaky, three_steps(Calls()), "e1", VirtualClock(), first)
    assert engine.start("flow", 1, id="w").result() == 4
    assert flaky.failures == 1
    stored = dict(storage_factory().scan(keys.workflow_partition("w"), keys.OP_PREFIX))
    assert sorted(stored) == [keys.OP_PREFIX + keys.step_slot(n) for n in range(3)]
