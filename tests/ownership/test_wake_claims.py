"""Which runs a wake may claim, and that every drive confirms the claim it runs on.

Rules pinned here (``ownership="workflow-lease"``, several engines on one store, every backend):

* a pending (delayed-start) run is never claimed by a wake: a signal or ``resume()`` leaves it
  unclaimed, its delayed start alone activates it, and the activation gets past any holder
  left on it (a leftover is fenced out by epoch + 1), so the epoch does not climb pass after
  pass;
* a claim lands only on a run that is still running, in the same atomic batch (a terminal run
  holds no claim), and maintenance cleans up claim records left on a run that is not running;
* every drive re-reads the holder (engine id AND epoch) right before it runs user code, a
  queued drive included: a claim taken when the drive was queued proves nothing later;
* an activity attempt starts only on a claim that has not outlived its renewals by the
  engine's own clock: an overdue claim is renewed first, and a refused renewal runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import pytest
from ownership_support import (
    GRACE,
    RENEW,
    TTL,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    caught,
    claim_indexed,
    epoch_of,
    fencing_violations,
    holder_of,
    layout_2,
    make_engine,
    make_engines,
    of_category,
    refused_step_writes,
)

from weft_serverless import Engine, workflow
from weft_serverless.codec import encode
from weft_serverless.engine.ownership import pack_epoch
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.errors import WorkflowClaimLost, WorkflowWakeDiscarded
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put, SortRange, Storage
from weft_serverless.testing import VirtualClock

Gen = Generator[Any, Any, Any]
PAST_EXPIRY = TTL + GRACE + 1.0
"""A clock step after which any claim written before it may be taken over."""


@pytest.fixture
def storage_factory(storage_factory: Opener) -> Opener:
    """These tests read the holder item and the claims index
    (the wake and clean-up rules of ADR 0010 item by item).
    They run on a store of layout 2, which this release keeps driving as it was (ADR
    0056); layout 3, where the head holds the claim, has its own tests
    (``test_claim_in_head.py``)."""
    return layout_2(storage_factory)


def signal_flow(calls: Calls) -> dict[str, Any]:
    """a -> wait "go" -> b."""

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("a", x)
        g = yield ctx.wait_for_signal("go")
        z = yield ctx.run("b", y + g)
        return z

    return {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda x: x + 1), b=calls.recorder("b", lambda x: x * 10))
        .execute(flow)
    }


def plant_holder(store: Storage, workflow_id: str, engine_id: str, epoch: int, at: float) -> None:
    """Store a holder, its claims-index entry and its epoch as an engine claiming
    ``workflow_id`` at ``at`` would (what earlier releases could leave on a run)."""
    holder = {"engine_id": engine_id, "epoch": epoch, "expires_at": at + TTL, "claimed_at": at}
    head = store.get(keys.owner_head_key(workflow_id))
    store.batch(
        [
            Put(keys.owner_epoch_key(workflow_id), pack_epoch(epoch)),
            Put(keys.owner_holder_key(workflow_id), encode(holder)),
            Put(keys.claim_index_key(keys.DEFAULT_SHARDS, workflow_id), encode({"e": engine_id})),
            # a run with a head carries its epoch there too (ADR 0037)
            *(
                []
                if head is None
                else [Put(keys.owner_head_key(workflow_id), Head.from_bytes(head).rotated(epoch))]
            ),
        ]
    )


# -- item: wakes on a pending run -------------------------------------------------------------


def test_a_signal_to_a_pending_run_leaves_its_activation_to_the_delayed_start(
    storage_factory: Opener,
) -> None:
    """A signal to a delayed-start run is buffered and claims nothing; when the start falls
    due one pass activates it at epoch 1 and it consumes the buffered signal; 20 passes past
    claim expiry, alternating engines, leave the epoch at 1 and no claim behind."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    store = storage_factory()
    e1.start("flow", 1, id="w", start_after=60)
    e1.signal("w", "go", 5)
    clock.advance(60)
    for turn in range(20):
        (e2, e1)[turn % 2].run_maintenance()
        clock.advance(PAST_EXPIRY)
    assert e1.describe("w").status == "completed"
    assert epoch_of(store, "w") == 1
    assert holder_of(store, "w") is None and not claim_indexed(store, "w")
    assert e1.get_handle("w").result() == 70
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_resume_of_a_pending_run_claims_nothing_and_it_starts_on_time(
    storage_factory: Opener,
) -> None:
    """``resume()`` on a delayed-start run (from any engine) reports ``pending``, raises
    nothing and writes no claim; the run still starts at its start time."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    store = storage_factory()
    e1.start("flow", 1, id="w", start_after=60)
    assert e2.resume("w") == "pending"
    assert e1.resume("w") == "pending"
    assert holder_of(store, "w") is None and not claim_indexed(store, "w")
    assert epoch_of(store, "w") == 0 and calls.log == []
    clock.advance(60)
    e2.run_maintenance()
    assert e2.describe("w").status == "running" and calls.count("a") == 1
    assert epoch_of(store, "w") == 1
    assert fencing_violations(journal) == []


def test_delayed_start_activates_over_a_holder_left_on_the_pending_run(
    storage_factory: Opener,
) -> None:
    """A live holder on a pending run (as an engine of an earlier release left it when a
    wake claimed the run) does not block its activation: the activating batch replaces it
    on the bytes read, with epoch + 1."""
    clock, calls = VirtualClock(), Calls()
    e1 = make_engine(storage_factory, signal_flow(calls), "e1", clock)
    store = storage_factory()
    e1.start("flow", 1, id="w", start_after=60)
    clock.advance(60)
    plant_holder(store, "w", "old", 4, clock())  # not expired: maintenance leaves it be
    e1.run_maintenance()
    assert e1.describe("w").status == "running" and calls.count("a") == 1
    holder = holder_of(store, "w")
    assert holder is not None and holder["engine_id"] == "e1" and holder["epoch"] == 5
    e1.signal("w", "go", 5)
    assert e1.get_handle("w").result() == 70


# -- item: a claim on a run that ends meanwhile -------------------------------------------------


class OnOwnerRead(RecordingStorage):
    """Runs ``hook`` once, on the first read of a workflow's owner records (``owner#``)."""

    hook: Callable[[], None] | None = None
    partition = keys.workflow_partition("w")

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        if self.hook is not None and rng.low == "owner#" and partition == self.partition:
            hook, self.hook = self.hook, None
            hook()
        return super()._scan(partition, rng, limit, reverse)


def test_a_run_finishing_between_the_wake_reads_gets_no_claim(storage_factory: Opener) -> None:
    """e2's wake reads the run as running; before it reads the owner records e1 finishes the
    run (acquire, drive, release). e2's claim is refused in its batch (conditioned on the
    running state): no holder or claims-index entry lands on the completed run, and later
    passes past claim expiry never claim it again (the epoch stays)."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = signal_flow(calls)
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal)
    racing = OnOwnerRead(storage_factory(), "e2", journal)
    e2 = Engine.create(
        racing,
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e2",
        recover=False,
    )
    store = storage_factory()
    with e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        e1.start("flow", 1, id="w")
    assert holder_of(store, "w") is None  # parked and released

    def finish_on_e1() -> None:
        e1.signal("w", "go", 5)
        assert e1.describe("w").status == "completed"

    racing.hook = finish_on_e1
    assert e2.recover_all() == 1  # a wake of the running run; e1 finishes it mid-way
    assert racing.hook is None, "the race was never injected"
    epoch = epoch_of(store, "w")
    assert e2.describe("w").status == "completed"
    assert holder_of(store, "w") is None and not claim_indexed(store, "w")
    assert e2.describe("w").owner is None
    for turn in range(4):
        clock.advance(PAST_EXPIRY)
        (e1, e2)[turn % 2].run_maintenance()
    assert epoch_of(store, "w") == epoch
    assert holder_of(store, "w") is None and not claim_indexed(store, "w")
    assert calls.count("b") == 1
    assert fencing_violations(journal) == []


@pytest.mark.parametrize("status", ["completed", "pending", "suspended"])
def test_maintenance_cleans_up_a_claim_left_on_a_run_that_is_not_running(
    storage_factory: Opener, status: str
) -> None:
    """A holder and claims-index entry stored on a completed, pending or suspended run (what
    the race above left before the fix) are removed by the first pass after the holder
    expires, with epoch + 1 so whoever wrote it is fenced out; later passes change nothing
    and the run is left as it was (a pending one still starts on time)."""
    clock, calls = VirtualClock(), Calls()
    e1 = make_engine(storage_factory, signal_flow(calls), "e1", clock)
    store = storage_factory()
    if status == "pending":
        e1.start("flow", 1, id="w", start_after=10 * PAST_EXPIRY)
    else:
        e1.start("flow", 1, id="w")
        if status == "completed":
            e1.signal("w", "go", 5)
        else:
            e1.suspend("w")
    assert e1.describe("w").status == status
    epoch = epoch_of(store, "w")
    plant_holder(store, "w", "old", epoch + 1, clock())
    clock.advance(PAST_EXPIRY)
    e1.run_maintenance()
    assert holder_of(store, "w") is None and not claim_indexed(store, "w")
    assert epoch_of(store, "w") == epoch + 2
    assert e1.describe("w").status == status
    for _ in range(3):
        clock.advance(PAST_EXPIRY)
        e1.run_maintenance()
    if status == "pending":
        clock.advance(10 * PAST_EXPIRY)
        e1.run_maintenance()
        assert e1.describe("w").status == "running" and calls.count("a") == 1
    else:
        assert epoch_of(store, "w") == epoch + 2
        assert e1.describe("w").status == status


class AfterStateRead(RecordingStorage):
    """Runs ``hook`` once, right after the first read of ``w``'s state returns (the caller
    then acts on a value that is already stale)."""

    hook: Callable[[], None] | None = None

    def _get(self, key: Key) -> bytes | None:
        value = super()._get(key)
        if self.hook is not None and key == keys.state_key("w"):
            hook, self.hook = self.hook, None
            hook()
        return value


def test_a_cleanup_racing_the_activation_it_would_undo_is_refused(
    storage_factory: Opener,
) -> None:
    """e1's pass reads a pending run with an expired leftover holder and decides to clean it
    up; before its batch lands, e2's pass cleans it up itself and activates the run. e1's
    cleanup is refused (it conditions on the holder, epoch and state it read) and, re-reading,
    leaves e2's live claim alone: the first activity runs once and e2 keeps the run."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = signal_flow(calls)
    racing = AfterStateRead(storage_factory(), "e1", journal)
    e1 = Engine.create(
        racing,
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
    )
    e2 = make_engine(storage_factory, flows, "e2", clock, journal=journal)
    store = storage_factory()
    e1.start("flow", 1, id="w", start_after=PAST_EXPIRY)
    plant_holder(store, "w", "old", 1, clock())
    clock.advance(PAST_EXPIRY)

    def pass_on_e2() -> None:
        e2.run_maintenance()
        assert e2.describe("w").status == "running"

    racing.hook = pass_on_e2
    e1.run_maintenance()
    assert racing.hook is None, "the race was never injected"
    refused = journal.by("e1", committed=False)
    assert any(Delete(keys.claim_index_key(keys.DEFAULT_SHARDS, "w")) in w.ops for w in refused), (
        refused
    )
    holder = holder_of(store, "w")
    assert holder is not None and holder["engine_id"] == "e2"
    assert epoch_of(store, "w") == holder["epoch"] == 3  # cleanup 2, activation 3
    assert claim_indexed(store, "w")
    assert calls.count("a") == 1
    e2.signal("w", "go", 5)
    assert e2.get_handle("w").result() == 70
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


# -- item: a queued drive confirms its claim ----------------------------------------------------


def test_a_queued_child_drive_confirms_ownership_and_the_activity_runs_once(
    storage_factory: Opener,
) -> None:
    """A parent on e1 starts an abandoned child: the child's claim lands in the start batch
    and its first drive is queued behind the parent's. While it is queued, e2 suspends and
    resumes the child (epoch 3), parks it before its first step and releases it. e1's queued
    drive then finds the holder changed, discards the wake with a warning and runs nothing;
    the child's activity runs exactly once, on the engine that owns it."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    engines: dict[str, Engine] = {}

    def meanwhile(_: Any) -> None:
        e2 = engines["e2"]
        e2.suspend("kid")
        with e2.invocation(time_left=lambda: 0.0, heartbeat=False):
            e2.resume("kid")  # claims epoch 3, parks before "c" for lack of time, releases
        calls.add("meanwhile")

    def parent(ctx: Any, _: Any) -> Gen:
        kid = yield ctx.start_child("child", None, id="kid", parent_close_policy="abandon")
        yield ctx.run("meanwhile")
        return kid

    def child(ctx: Any, _: Any) -> Gen:
        return (yield ctx.run("c"))

    flows = {
        "parent": workflow("parent").activities(meanwhile=meanwhile).execute(parent),
        "child": workflow("child")
        .activities(c=calls.recorder("c", lambda _: "done"))
        .execute(child),
    }
    engines.update(make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal))
    store = storage_factory()
    with caught() as seen:
        engines["e1"].start("parent", id="p")
    assert calls.count("meanwhile") == 1
    assert engines["e1"].describe("p").status == "completed"
    assert calls.count("c") == 0, "the queued drive ran the child on a claim it lost"
    assert any("'kid'" in m for m in of_category(seen, WorkflowWakeDiscarded))
    assert epoch_of(store, "kid") == 3
    engines["e2"].run_maintenance()  # fires the timer the parked child left
    assert engines["e2"].get_handle("kid").result() == "done"
    assert calls.count("c") == 1
    assert fencing_violations(journal) == []


class AfterClaimWrite(RecordingStorage):
    """Runs ``hook`` once, right after this engine's first write that puts ``w``'s holder
    has landed (another engine acts between that write and this engine's next read)."""

    hook: Callable[[], None] | None = None

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        ok = super()._conditional_batch(conditions, ops)
        claims_w = any(isinstance(op, Put) and op.key == keys.owner_holder_key("w") for op in ops)
        if ok and claims_w and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return ok


def test_a_drive_on_a_claim_rotated_before_its_history_read_runs_nothing(
    storage_factory: Opener,
) -> None:
    """e2's pass fires a deferred run's timer and acquires the run (epoch 2). Right after that
    claim lands, and before e2's drive reads the history, e1 suspends and resumes the run
    (epoch 4), parks it before its first step and releases it. e2's drive reads epoch 4 with
    the history: it runs nothing and drops the claim with a warning. The first activity then
    runs exactly once, on the engine that next claims the run."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = signal_flow(calls)
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal)
    racing = AfterClaimWrite(storage_factory(), "e2", journal)
    e2 = Engine.create(
        racing,
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e2",
        recover=False,
    )
    store = storage_factory()
    with e1.invocation(time_left=lambda: 0.0, heartbeat=False):
        e1.start("flow", 1, id="w")  # deferred behind a timer due now, released at the end
    assert holder_of(store, "w") is None and calls.count("a") == 0

    def suspend_and_resume_on_e1() -> None:
        e1.suspend("w")
        with e1.invocation(time_left=lambda: 0.0, heartbeat=False):
            e1.resume("w")  # claims epoch 4, parks before "a" for lack of time, releases

    racing.hook = suspend_and_resume_on_e1
    with caught() as seen:
        e2.run_maintenance()
    assert racing.hook is None, "the race was never injected"
    assert epoch_of(store, "w") == 4
    assert calls.count("a") == 0, "e2 ran the activity on a claim rotated before its read"
    assert any("'w'" in m for m in of_category(seen, WorkflowClaimLost))
    assert refused_step_writes(journal, "e2", "w") == []
    clock.advance(PAST_EXPIRY)
    e1.run_maintenance()  # fires the timer the parked run left
    assert calls.count("a") == 1
    e1.signal("w", "go", 5)
    assert e1.get_handle("w").result() == 70
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


class StallBeforeStart(RecordingStorage):
    """This engine's handle of the store: its start batch of ``w`` lands only after the
    engine stalled for ``stall`` seconds (the claim in it is stamped before the stall);
    ``hook`` runs once right before its first step commit of ``w`` (after the activity ran),
    ``after_history`` once right after a drive read ``w``'s history (before anything ran)."""

    def __init__(self, inner: Storage, engine: str, journal: Journal, clock: VirtualClock) -> None:
        super().__init__(inner, engine, journal)
        self.clock = clock
        self.stall = 0.0
        self.hook: Callable[[], None] | None = None
        self.after_history: Callable[[], None] | None = None

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        found = list(super()._scan(partition, rng, limit, reverse))
        whole = rng.low is None and rng.high is None
        if whole and partition == keys.workflow_partition("w") and self.after_history:
            hook, self.after_history = self.after_history, None
            hook()
        return iter(found)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        starts_w = any(c.key == keys.state_key("w") and c.expected is None for c in conditions)
        if starts_w and self.stall:
            self.clock.advance(self.stall)
            self.stall = 0.0
        commits_step = any(
            isinstance(op, Put)
            and op.key.partition == keys.workflow_partition("w")
            and op.key.sort.startswith(keys.OP_PREFIX)
            for op in ops
        )
        if commits_step and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super()._conditional_batch(conditions, ops)


def test_an_activity_does_not_run_on_a_claim_that_expired_before_it(
    storage_factory: Opener,
) -> None:
    """e1 builds its start batch (claim stamped to expire TTL later), then stalls past the
    claim's expiry and grace before the batch lands, and drives the run inline. Its claim has
    expired by its own clock: it renews it before running "a" (no takeover is possible after
    that), so when e2's pass runs between "a" and e1's commit of it, e2 takes nothing over and
    "a" runs once. Before, e1 ran "a" on the expired claim, e2 took the run over and ran "a"
    again, and e1's commit was fenced out."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = signal_flow(calls)
    stalling = StallBeforeStart(storage_factory(), "e1", journal, clock)
    e1 = Engine.create(
        stalling,
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
        workflow_claim_ttl=TTL,
        workflow_claim_renew_interval=RENEW,
    )
    e2 = make_engine(storage_factory, flows, "e2", clock, journal=journal)
    store = storage_factory()
    stalling.stall = PAST_EXPIRY
    stalling.hook = e2.run_maintenance
    e1.start("flow", 1, id="w")
    assert stalling.hook is None, "the race was never injected"
    assert calls.count("a") == 1, "the activity ran again after a takeover of a stale claim"
    holder = holder_of(store, "w")
    assert holder is not None and holder["engine_id"] == "e1" and epoch_of(store, "w") == 1
    assert refused_step_writes(journal, "e1", "w") == []
    e1.signal("w", "go", 5)
    assert e1.get_handle("w").result() == 70
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_an_activity_runs_nothing_when_renewing_its_expired_claim_is_refused(
    storage_factory: Opener,
) -> None:
    """As above, but e2's pass runs right after e1's drive read the history (epoch 1, still
    e1's): e2 takes the stale claim over and runs "a" itself. e1, about to run "a" on a claim
    expired by its own clock, tries to renew it, is refused, and runs nothing: "a" ran once
    (on e2), and e1 never tried to commit it. Before, e1 ran "a" again and was fenced out."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = signal_flow(calls)
    stalling = StallBeforeStart(storage_factory(), "e1", journal, clock)
    e1 = Engine.create(
        stalling,
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
        workflow_claim_ttl=TTL,
        workflow_claim_renew_interval=RENEW,
    )
    e2 = make_engine(storage_factory, flows, "e2", clock, journal=journal)
    store = storage_factory()
    stalling.stall = PAST_EXPIRY
    stalling.after_history = e2.run_maintenance
    with caught() as seen:
        e1.start("flow", 1, id="w")
    assert stalling.after_history is None, "the race was never injected"
    assert calls.count("a") == 1, "e1 ran the activity on a claim e2 had taken over"
    assert any("'w'" in m for m in of_category(seen, WorkflowClaimLost))
    holder = holder_of(store, "w")
    assert holder is not None and holder["engine_id"] == "e2" and epoch_of(store, "w") == 2
    assert refused_step_writes(journal, "e1", "w") == []
    e2.signal("w", "go", 5)
    assert e2.get_handle("w").result() == 70
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []
