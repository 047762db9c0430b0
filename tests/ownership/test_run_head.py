"""A plain step committed on the run's head (ADR 0037): its cost, crashes at every write of
it, and a deposed owner's write-out landing late, after a takeover, a retry or a purge.

Every test runs on every backend; journals record what each engine wrote, and
``fencing_violations`` holds each write to the rule the head keeps (a step lands on the
current epoch by its holder; a write-out lands only as the committed step's bytes, or where
no reader counts it).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from ownership_support import (
    RENEW,
    TAKEOVER,
    TTL,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    Write,
    fencing_violations,
    is_head_step,
    is_write_out,
    rewritten_op_records,
    step_commits,
)

from weft_serverless import Engine, RetryPolicy, workflow
from weft_serverless.codec import decode, encode
from weft_serverless.engine.inspection import read_history
from weft_serverless.engine.ownership import PARK_LAYOUT
from weft_serverless.engine.persistence.records import load_history
from weft_serverless.engine.persistence.run_head import FENCE_EPOCH, REFERENCE, TOMBSTONE, Head
from weft_serverless.errors import WorkflowNotFoundError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Capabilities, Condition, Op, Put, Storage
from weft_serverless.testing import CrashingStorage, SimulatedCrash, VirtualClock

Gen = Generator[Any, Any, Any]


def three_steps(calls: Calls, pad: int = 0) -> dict[str, Any]:
    """Three steps counting up from the input; ``pad`` bytes more in each result make its
    record too large for the head (it is put first, as a blob the head names)."""

    def flow(ctx: Any, x: int) -> Gen:
        a = yield ctx.run("a", x)
        b = yield ctx.run("b", a)
        c = yield ctx.run("c", b)
        return c["n"] if pad else c

    def count(v: Any) -> Any:
        n = (v if isinstance(v, int) else v["n"]) + 1
        return {"n": n, "pad": "x" * pad} if pad else n

    activities = {name: calls.recorder(name, count) for name in ("a", "b", "c")}
    return {"flow": workflow("flow").activities(**activities).execute(flow)}


def engine_on(
    storage: Storage, flows: dict[str, Any], engine_id: str, clock: VirtualClock
) -> Engine:
    return Engine.create(
        storage,
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id=engine_id,
        workflow_claim_ttl=TTL,
        workflow_claim_renew_interval=RENEW,
    )


def test_a_forward_step_is_a_write_out_and_a_head_put_and_no_transaction(
    storage_factory: Opener,
) -> None:
    """After the first step, each forward step is the write-out of the previous step
    (conditioned on its own slot) and the head put carrying the new step (conditioned on
    the head), both landed: two single-item writes, no fenced batch, on a store that bills
    a batch per item (DynamoDB); one batch of the two under both conditions, one commit,
    on a store where a batch is one commit whatever it holds (SQLite, ADR 0051)."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    storage = RecordingStorage(storage_factory(), "e1", journal)
    engine = engine_on(storage, three_steps(calls), "e1", clock)
    assert engine.start("flow", 1, id="w").result() == 4
    head_puts = [w for w in journal.writes if step_commits(w)]
    assert [step_commits(w) for w in head_puts] == [
        [f"wf#w/op#{keys.step_slot(n)}"] for n in range(3)
    ]
    head, written_out = keys.owner_head_key("w"), keys.op_key("w", keys.step_slot(1))
    assert all(write.committed for write in head_puts)
    assert [c.key for c in head_puts[0].conditions] == [head]  # nothing inline to write out
    if storage.capabilities().cheap_multi_item_batch:
        for n, write in enumerate(head_puts[1:]):
            before = keys.op_key("w", keys.step_slot(n))
            assert [op.key for op in write.ops] == [before, head]
            assert [c.key for c in write.conditions] == [before, head]
        assert sum(1 for w in journal.writes if w.puts(written_out)) == 1  # no write-out alone
    else:
        for write in head_puts:
            assert len(write.ops) == 1
            assert [c.key for c in write.conditions] == [head]
        # one write-out of each step but the last (its end writes that one out), none twice
        outs = [w.ops[0].key for w in journal.writes if is_write_out(w)]
        assert outs == [keys.op_key("w", keys.step_slot(n)) for n in range(3)]
    capabilities = storage.capabilities()
    if not capabilities.cheap_multi_item_batch and not capabilities.concurrent_requests:
        # between two head puts: one write-out of the step before, nothing else
        second, third = journal.writes.index(head_puts[1]), journal.writes.index(head_puts[2])
        assert is_write_out(journal.writes[second - 1])
        assert is_write_out(journal.writes[third - 1])
        assert journal.writes[third - 1].ops[0].key == written_out
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}
    stored = dict(storage_factory().scan(keys.workflow_partition("w"), keys.OP_PREFIX))
    assert sorted(stored) == [f"op#{keys.step_slot(n)}" for n in range(3)]  # all written out
    assert all(decode(v)[FENCE_EPOCH] == 1 for v in stored.values())


@pytest.mark.backends("dynamodb", "dynamodb-http")
def test_a_700_byte_step_costs_two_write_units_and_no_read_units(
    storage_factory: Opener,
) -> None:
    """Issue 19's bound, billed by the adapter's meter: a forward step of a 700-byte result
    under workflow-lease costs 2 write units and no read units (the marginal cost of ten
    more steps, so the run's start and end are not counted)."""
    body = b"x" * 700

    def flow(ctx: Any, steps: int) -> Gen:
        for step in range(steps):
            yield ctx.run("payload", step)
        return steps

    flows = {"flow": workflow("flow").activities(payload=lambda step: body).execute(flow)}
    storage = storage_factory()
    meter = storage.meter  # type: ignore[attr-defined]
    engine = engine_on(storage, flows, "e1", VirtualClock())
    used = []
    for steps in (5, 15):
        before = meter.snapshot()
        assert engine.start("flow", steps, id=f"w{steps}").result() == steps
        used.append(meter.snapshot() - before)
    delta = used[1] - used[0]
    assert (delta.write_units, delta.read_units) == (20, 0)
    assert set(delta.by_operation) == {"PutItem"}


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("pad", [0, 4000], ids=["inline", "blob"])
def test_a_plain_step_is_one_commit_where_a_batch_is_one_commit(
    storage_factory: Opener, pad: int
) -> None:
    """Issue 28's goal 5, counted: on SQLite a forward step under workflow-lease is one
    commit (one fsync), as under ``none``: the write-out of the step before it, its blob
    and its head put go as one batch. The marginal count of ten more steps, so the run's
    start and end are not counted."""
    flows = three_steps(Calls(), pad)

    def many(ctx: Any, steps: int) -> Gen:
        for step in range(steps):
            yield ctx.run("a", step)
        return steps

    flows["many"] = workflow("many").activities(a=lambda v: {"pad": "x" * pad}).execute(many)
    commits: dict[str, list[int]] = {}
    for mode in ("none", "workflow-lease"):
        storage = storage_factory()
        engine = Engine.create(
            storage, flows, ownership=mode, background_tasks="manual", clock=VirtualClock()
        )
        for steps in (5, 15):
            before = storage.stats.snapshot()
            assert engine.start("many", steps, id=f"{mode}-{steps}").result() == steps
            after = storage.stats.snapshot()
            writes = after["batches"] + after["conditional_batches"]
            commits.setdefault(mode, []).append(
                writes - before["batches"] - before["conditional_batches"]
            )
    per_step = {mode: (counts[1] - counts[0]) / 10 for mode, counts in commits.items()}
    assert per_step == {"none": 1.0, "workflow-lease": 1.0}


class EarlyWriteOut(RecordingStorage):
    """A handle on which, just before the owner's first batch that writes a step out beside
    its head put, another writer lands the same write-out alone (a deposed owner's late
    write-out, arriving between the owner's read of the run and its next step)."""

    def __init__(self, inner: Storage, engine: str, journal: Journal) -> None:
        super().__init__(inner, engine, journal)
        self.raced: list[Write] = []

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        write = Write(0, self.engine, tuple(conditions), tuple(ops), True)
        if not self.raced and len(ops) > 1 and is_head_step(write):
            out = next(op for op in ops if op.key.sort.startswith(keys.OP_PREFIX))
            assert isinstance(out, Put)
            RecordingStorage(self.inner, "late", self.journal).put(out.key, out.value)
            self.raced.append(write)
        return super()._conditional_batch(conditions, ops)


@pytest.mark.backends("sqlite")
def test_a_write_out_racing_the_folded_step_refuses_it_and_the_step_commits_apart(
    storage_factory: Opener,
) -> None:
    """The folded batch expects the slot it writes out as read; when the same bytes landed
    there first, the batch is refused whole (the head does not move), and the step is
    committed as on any store: the write-out alone finds its own bytes, then the head put
    lands. Nothing runs twice, no step is committed twice, no write breaks the fence."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    storage = EarlyWriteOut(storage_factory(), "e1", journal)
    engine = engine_on(storage, three_steps(calls), "e1", clock)
    assert engine.start("flow", 1, id="w").result() == 4
    [raced] = storage.raced
    fold, alone = journal.by("e1", committed=False)
    assert fold.ops == raced.ops  # the fold, refused whole
    assert is_write_out(alone) and alone.ops == fold.ops[:1]  # its slot holds these bytes
    head = journal.writes[journal.writes.index(alone) + 1]
    assert step_commits(head) == [f"wf#w/op#{keys.step_slot(1)}"] and head.committed
    assert len(head.ops) == 1
    assert [calls.count(name) for name in ("a", "b", "c")] == [1, 1, 1]
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def _writes_of_one_run(storage_factory: Opener, pad: int) -> int:
    """How many writes one engine makes from its start call to the run's end."""
    crashing = CrashingStorage(storage_factory())
    engine = engine_on(crashing, three_steps(Calls(), pad), "probe", VirtualClock())
    before = crashing.writes
    assert engine.start("flow", 1, id="probe").result() == 4
    return crashing.writes - before


@pytest.mark.parametrize("pad", [0, 4000], ids=["inline", "blob"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_every_write_of_a_run_loses_and_doubles_no_step(
    storage_factory: Opener, when: str, pad: int
) -> None:
    """The owner dies before (or right after) each of its writes in turn: the start, the
    write-outs, the blobs of large records, the head puts, the end. Another engine takes the
    run over; it completes with the right result, every step committed once, and no write
    breaks the fence (a blob whose head never landed is named by nothing)."""
    count = _writes_of_one_run(storage_factory, pad)
    # start, 3 heads (+ 3 blobs), write-outs, the end; where blobs and write-outs go in the
    # head's batch (ADR 0051), the start, 3 heads, the last write-out, the end
    folds = storage_factory().capabilities().cheap_multi_item_batch
    assert count >= (9 if pad and not folds else 6)
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = three_steps(calls, pad)
    survivor = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)
    for n in range(1, count + 1):
        crashing = CrashingStorage(RecordingStorage(storage_factory(), f"e1-{n}", journal))
        owner = engine_on(crashing, flows, f"e1-{n}", clock)
        setattr(crashing, f"crash_{when}_write", crashing.writes + n)
        with pytest.raises(SimulatedCrash):
            owner.start("flow", 1, id=f"w{n}")
    clock.advance(TAKEOVER)
    survivor.run_maintenance()
    for n in range(1, count + 1):
        try:
            result = survivor.get_handle(f"w{n}").result()
        except WorkflowNotFoundError:
            assert (when, n) == ("before", 1)  # the start never landed
            continue
        assert result == 4, n
        history = load_history(storage_factory(), f"w{n}")
        assert history is not None and sorted(history.ops) == [keys.step_slot(i) for i in range(3)]
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}


class LateWriteOut(RecordingStorage):
    """A handle whose first write-out of ``slot`` is held in flight while ``meanwhile`` runs
    (other engines act on the run), then sent: the deposed owner's late write-out. Where the
    store folds it into the next step's head put (ADR 0051), that batch is refused (the head
    moved meanwhile) and the owner sends the write-out alone, as on any store: ``landed``
    says whether any of its writes of the slot landed."""

    def __init__(
        self,
        inner: Storage,
        engine: str,
        journal: Journal,
        slot: str,
        meanwhile: Callable[[], None],
    ) -> None:
        super().__init__(inner, engine, journal)
        self.slot, self.meanwhile = slot, meanwhile
        self.landed: bool | None = None

    def capabilities(self) -> Capabilities:
        """The write-out goes before the head put, one after the other: the late write-out
        holds the owner's thread (the write-out sent beside the head put, ADR 0057, is raced
        in ``test_run_head_pair.py``)."""
        return replace(self.inner.capabilities(), concurrent_requests=False)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        item = next(
            (op.key for op in ops if op.key.sort == keys.OP_PREFIX + self.slot),
            None,
        )
        write_out = (
            item is not None
            and any(c.key == item for c in conditions)
            and (len(ops) == 1 or is_head_step(Write(0, "", tuple(conditions), tuple(ops), True)))
        )
        if not write_out:
            return super()._conditional_batch(conditions, ops)
        if self.landed is None:
            self.meanwhile()
        landed = super()._conditional_batch(conditions, ops)
        self.landed = bool(self.landed) or landed
        return landed


def _late_write_out_run(
    storage_factory: Opener, meanwhile: Callable[[Engine, VirtualClock], None]
) -> tuple[Engine, LateWriteOut, Journal, Calls]:
    """e1 commits steps a and b on the head; before its write-out of step a lands, e1 has
    stalled past its claim and ``meanwhile`` lets e2 act on the run."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        a = yield ctx.run("a", x)
        b = yield ctx.run("b", a)
        return b

    recorders = {name: calls.recorder(name, lambda v: v + 1) for name in ("a", "b")}
    flows = {"flow": workflow("flow").activities(**recorders).execute(flow)}
    e2 = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)

    def act() -> None:
        clock.advance(TAKEOVER)
        meanwhile(e2, clock)

    late = LateWriteOut(storage_factory(), "e1", journal, keys.step_slot(0), act)
    e1 = engine_on(late, flows, "e1", clock)
    e1.start("flow", 1, id="w")  # deposed at its next write: returns without raising
    return e2, late, journal, calls


def test_a_late_write_out_after_the_takeover_and_the_new_owners_own_lands_nothing_new(
    storage_factory: Opener,
) -> None:
    """e2 takes over and finishes the run (writing step a out itself) while e1's write-out of
    a is in flight: e1's write-out is refused (the slot is taken), its head put too."""

    def meanwhile(e2: Engine, clock: VirtualClock) -> None:
        e2.run_maintenance()
        assert e2.get_handle("w").result() == 3

    e2, late, journal, _ = _late_write_out_run(storage_factory, meanwhile)
    assert late.landed is False
    assert e2.get_handle("w").result() == 3
    history = load_history(storage_factory(), "w")
    assert history is not None and len(history.ops) == 2
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_a_late_write_out_before_the_new_owner_writes_the_step_out_is_the_same_bytes(
    storage_factory: Opener,
) -> None:
    """e2 took the claim but has not driven yet: e1's late write-out lands (the slot was
    empty) with the bytes of the step committed on the head e2 carries; e2 then finds them
    there, and no step runs twice or is committed twice."""

    def meanwhile(e2: Engine, clock: VirtualClock) -> None:
        ownership = e2.runtime.fence
        assert ownership._take_over("w", clock())  # type: ignore[attr-defined]

    e2, late, journal, calls = _late_write_out_run(storage_factory, meanwhile)
    assert late.landed is True
    e2._session.wake("w", "reclaim")  # e2 now drives the run it took over
    assert e2.get_handle("w").result() == 3
    assert calls.count("a") == 1
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_a_late_write_out_of_a_step_a_retry_forgot_is_refused_by_its_tombstone(
    storage_factory: Opener,
) -> None:
    """The resurrection case: b fails and ends the run; e2 finishes the failure, the run is
    retried (b forgotten: a tombstone on the retry's epoch), and only then does e1's
    write-out of the failed b arrive. It is refused; b runs again and the run completes."""

    def meanwhile(e2: Engine) -> None:
        e2.run_maintenance()
        assert e2.describe("w").status == "failed"
        failing_b.clear()
        operator.retry("w")  # an engine that cannot run the type: the run waits for e2
        forgotten = storage_factory().get(keys.op_key("w", keys.step_slot(1)))
        assert forgotten is not None and decode(forgotten)[TOMBSTONE]

    failing_b = {"on"}
    clock, journal, calls = VirtualClock(), Journal(), Calls()

    def b(v: int) -> int:
        calls.add("b", v)
        if failing_b:
            raise ValueError("b fails")
        return v + 1

    def flow(ctx: Any, x: int) -> Gen:
        a = yield ctx.run("a", x)
        got = yield ctx.run("b", a, retry=RetryPolicy(max_attempts=1))
        return got

    flows = {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda v: v + 1), b=b)
        .execute(flow)
    }
    e2 = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)
    operator = engine_on(RecordingStorage(storage_factory(), "op", journal), {}, "op", clock)

    def act() -> None:
        clock.advance(TAKEOVER)
        meanwhile(e2)

    # e1 commits the failed b on the head, then writes it out before ending the run
    late = LateWriteOut(storage_factory(), "e1", journal, keys.step_slot(1), act)
    e1 = engine_on(late, flows, "e1", clock)
    e1.start("flow", 1, id="w")
    assert late.landed is False  # the tombstone holds the slot
    clock.advance(TAKEOVER)  # the retry's claim (the operator's) runs out
    e2.run_maintenance()
    assert e2.get_handle("w").result() == 3
    history = load_history(storage_factory(), "w")
    assert history is not None
    assert history.ops[keys.step_slot(1)].ok is True
    read = read_history(storage_factory(), "w")
    assert read is not None
    [failure] = read.failed_attempts  # b's failure stays as the run's history (ADR 0044)
    assert (failure["activity"], failure["attempt"], failure["error_type"]) == (
        "b",
        1,
        "ValueError",
    )
    assert fencing_violations(journal) == []


def test_a_late_write_out_into_a_new_run_of_a_purged_id_counts_for_nothing(
    storage_factory: Opener,
) -> None:
    """The run ends and is purged; a new run takes the id (its floor is its first epoch);
    e1's write-out of the old run's step a then lands in the empty slot. No reader counts
    it: the new run replays nothing from it, runs its own step a and completes."""

    def meanwhile(e2: Engine) -> None:
        e2.run_maintenance()
        assert e2.get_handle("w").result() == 3
        e2.purge("w")
        e2.start("other", 10, id="w")  # parks on a signal before its first step

    clock, journal, calls = VirtualClock(), Journal(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        a = yield ctx.run("a", x)
        got = yield ctx.run("b", a)
        return got

    def other(ctx: Any, x: int) -> Gen:
        go = yield ctx.wait_for_signal("go")
        a = yield ctx.run("a", x + go)
        return a

    recorders = {
        "a": calls.recorder("a", lambda v: v + 1),
        "b": calls.recorder("b", lambda v: v + 1),
    }
    flows = {
        "flow": workflow("flow").activities(**recorders).execute(flow),
        "other": workflow("other").activities(**recorders).execute(other),
    }
    e2 = engine_on(RecordingStorage(storage_factory(), "e2", journal), flows, "e2", clock)

    def act() -> None:
        clock.advance(TAKEOVER)
        meanwhile(e2)

    late = LateWriteOut(storage_factory(), "e1", journal, keys.step_slot(0), act)
    e1 = engine_on(late, flows, "e1", clock)
    e1.start("flow", 1, id="w")
    stale = storage_factory().get(keys.op_key("w", keys.step_slot(0)))
    head = storage_factory().get(keys.owner_head_key("w"))
    assert late.landed is True and stale is not None and head is not None
    assert decode(stale)[FENCE_EPOCH] < Head.from_bytes(head).floor
    history = load_history(storage_factory(), "w")
    assert history is not None and history.ops == {}  # the stale item counts for nothing
    e2.signal("w", "go", 5)
    assert e2.get_handle("w").result() == 16  # its own step a ran, on 10 + 5
    assert fencing_violations(journal) == []


def test_a_large_record_is_put_first_and_the_head_names_it(storage_factory: Opener) -> None:
    """A record too large for the head is put as a blob before the head that commits a
    small record naming it; replay reads the step's full result back through it."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    storage = RecordingStorage(storage_factory(), "e1", journal)
    engine = engine_on(storage, three_steps(calls, 4000), "e1", clock)
    assert engine.start("flow", 1, id="w").result() == 4
    partition = keys.workflow_partition("w")
    blobs = dict(storage_factory().scan(partition, keys.BLOB_PREFIX))
    ops = dict(storage_factory().scan(partition, keys.OP_PREFIX))
    assert len(blobs) == 3 and all(len(v) > 4000 for v in blobs.values())
    assert all(len(v) < 100 and REFERENCE in decode(v) for v in ops.values())
    history = load_history(storage_factory(), "w")
    assert history is not None
    values = [history.ops[keys.step_slot(n)].value for n in range(3)]
    assert [len(decode(value)["pad"]) for value in values] == [4000] * 3
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_a_store_set_up_by_an_earlier_release_keeps_committing_as_it_did(
    storage_factory: Opener,
) -> None:
    """A store whose marker says plain ``workflow-lease`` (an earlier release set it up) is
    accepted, and its runs get no head: every step is the fenced batch that release wrote,
    so engines of both releases can share it. A fresh store is set up with the head layout,
    which engines of the earlier release refuse (their mode string differs)."""
    storage = storage_factory()
    marker = encode({"mode": "workflow-lease", "established_at": 0.0})
    storage.put(keys.meta_key(keys.OWNERSHIP_MODE), marker)
    journal, calls = Journal(), Calls()
    engine = engine_on(
        RecordingStorage(storage, "e1", journal), three_steps(calls), "e1", VirtualClock()
    )
    assert engine.start("flow", 1, id="w").result() == 4
    assert storage.get(keys.owner_head_key("w")) is None
    steps = [w for w in journal.writes if step_commits(w)]
    assert len(steps) == 3
    assert all(w.condition_on(keys.owner_epoch_key("w")) is not None for w in steps)
    assert fencing_violations(journal) == []
    assert (
        decode(storage.get(keys.meta_key(keys.OWNERSHIP_MODE)) or b"")["mode"] == "workflow-lease"
    )


def test_a_fresh_store_is_marked_with_the_head_layout(storage_factory: Opener) -> None:
    engine_on(storage_factory(), {}, "e1", VirtualClock()).close()
    marker = storage_factory().get(keys.meta_key(keys.OWNERSHIP_MODE))
    assert marker is not None and decode(marker)["mode"] == PARK_LAYOUT


@pytest.mark.backends("dynamodb")
def test_resume_after_1000_head_steps_costs_the_requests_of_a_short_run(
    storage_factory: Opener,
) -> None:
    """Issue 19's bound on resume: a run parked after 1,000 plain steps of 700 B (each
    committed on the head, written out the step after) is resumed by a fresh engine in as
    many requests as a run parked after 10, save the extra 1 MB pages of its one range
    read: ceil(bytes / 1 MB) - 1 more, here none (its partition is under 1 MB)."""
    body = b"x" * 700

    def flow(ctx: Any, steps: int) -> Gen:
        for step in range(steps):
            yield ctx.run("payload", step)
        go = yield ctx.wait_for_signal("go")
        return go

    flows = {"flow": workflow("flow").activities(payload=lambda step: body).execute(flow)}
    clock = VirtualClock()
    owner = engine_on(storage_factory(), flows, "e1", clock)
    for steps in (10, 1000):
        owner.start("flow", steps, id=f"w{steps}")
    owner.close()  # parks and releases: a fresh engine resumes them
    storage = storage_factory()
    meter = storage.meter  # type: ignore[attr-defined]
    resumer = engine_on(storage, flows, "e2", clock)
    used = {}
    for steps in (10, 1000):
        before = meter.snapshot()
        resumer.signal(f"w{steps}", "go", steps)
        assert resumer.get_handle(f"w{steps}").result() == steps
        used[steps] = (meter.snapshot() - before).requests
    size = sum(len(v) for _, v in storage.scan(keys.workflow_partition("w1000")))
    assert size < 1024 * 1024
    assert used[1000] == used[10]
