"""``ownership="workflow-lease"``: every claim transition and rule, several engines on one store.

Each test runs on every registered backend (memory, SQLite, DynamoDB on moto in-process and
over HTTP). Engines are ``Engine.create(..., background_tasks="manual")`` on their own handle of
one store, named ``e1``, ``e2``... and sharing one ``VirtualClock``: time moves only when a test
advances it, and a timer fires only when a test calls ``run_maintenance()``.

Claim timing is the default (ttl 30 s, renew 5 s), so a claim last written at ``t`` may be taken
over only when ``t + 30 + 2 x 5 < now``, strictly.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import pytest
from ownership_support import (
    GRACE,
    RENEW,
    T0,
    TTL,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    SkewedClock,
    caught,
    claim_indexed,
    counter,
    epoch_of,
    fencing_violations,
    holder_of,
    is_write_out,
    landed_after,
    layout_2,
    make_engine,
    make_engines,
    of_category,
    op_slots,
    refused_step_writes,
    rewritten_op_records,
    step_commits,
    step_fence,
    timers_of,
)

from weft_serverless import (
    Engine,
    RetryPolicy,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotRunningError,
    workflow,
)
from weft_serverless.codec import decode
from weft_serverless.engine.ownership import EngineDeposedError, pack_epoch
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.errors import (
    StorageUnavailableError,
    WorkflowClaimLost,
    WorkflowClaimUnavailableError,
    WorkflowWakeDiscarded,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Put, Storage
from weft_serverless.testing import SimulatedCrash, VirtualClock

Gen = Generator[Any, Any, Any]


@pytest.fixture
def storage_factory(storage_factory: Opener) -> Opener:
    """These tests read the holder item and the claims index
    (the protocol of ADR 0004 item by item).
    They run on a store of layout 2, which this release keeps driving as it was (ADR
    0056); layout 3, where the head holds the claim, has its own tests
    (``test_claim_in_head.py``)."""
    return layout_2(storage_factory)


def expired_after(written_at: float) -> float:
    """The last instant at which a claim written at ``written_at`` is still NOT expired."""
    return written_at + TTL + GRACE


def signal_flow(calls: Calls) -> Any:
    """a -> wait "go" -> b: parks holding its claim until a signal arrives."""

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


# -- acquire, renew, release, rotate --------------------------------------------------------------


def test_start_folds_the_acquire_into_the_start_batch(storage_factory: Opener) -> None:
    """Acquire is folded into the start batch: epoch 0 -> 1 and the holder land with the state.

    The one batch that creates the workflow also writes epoch 1 and the holder
    ``{engine_id, epoch, expires_at, claimed_at}``, conditioned on both being absent (a new
    id); ``describe().owner`` and the claims index show the claim.
    """
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1 = make_engine(storage_factory, signal_flow(calls), "e1", clock, journal=journal)
    store = storage_factory()
    mark = journal.mark()
    e1.start("flow", 1, id="w")

    state_key = keys.state_key("w")
    start = next(w for w in landed_after(journal, "e1", mark) if w.puts(state_key))
    assert start.puts(keys.owner_epoch_key("w")) and start.puts(keys.owner_holder_key("w"))
    assert start.condition_on(keys.owner_epoch_key("w")) == Condition(
        keys.owner_epoch_key("w"), None
    )
    assert start.condition_on(keys.owner_holder_key("w")) == Condition(
        keys.owner_holder_key("w"), None
    )
    assert start.condition_on(state_key) == Condition(state_key, None)
    # The start batch is the first write of the holder: no standalone claim write came first.
    assert next(w for w in journal.writes if w.puts(keys.owner_holder_key("w"))) is start
    owner = {"engine_id": "e1", "epoch": 1, "expires_at": T0 + TTL, "claimed_at": T0}
    assert epoch_of(store, "w") == 1
    assert holder_of(store, "w") == owner
    assert e1.describe("w").owner == owner
    assert claim_indexed(store, "w")
    assert e1.describe("w").status == "running" and calls.count("a") == 1


def test_start_counts_an_acquired_claim_and_the_claims_gauge(storage_factory: Opener) -> None:
    """Metrics: an acquire folded into a start counts as ``claim_attempts.acquired``.

    After a maintenance pass, ``claims_active`` equals the claims this engine holds.
    """
    clock, calls = VirtualClock(), Calls()
    e1 = make_engine(storage_factory, signal_flow(calls), "e1", clock)
    e1.start("flow", 1, id="w1")
    e1.start("flow", 2, id="w2")
    e1.run_maintenance()
    assert counter(e1, "claims_active") == 2
    assert counter(e1, "claim_attempts.acquired") == 2


def test_renewal_runs_in_maintenance_once_due_and_keeps_epoch_and_claimed_at(
    storage_factory: Opener,
) -> None:
    """Renew: maintenance rewrites the holder once ``renew_interval`` passed, never before.

    The renewed holder keeps engine id, epoch and ``claimed_at`` and moves ``expires_at`` to
    ``now + ttl``; the epoch item is untouched; a claim kept renewed is never taken over.
    """
    clock, calls = VirtualClock(), Calls()
    e1, e2 = make_engines(storage_factory, signal_flow(calls), ["e1", "e2"], clock).values()
    store = storage_factory()
    e1.start("flow", 1, id="w")
    before = store.get(keys.owner_holder_key("w"))

    clock.advance(RENEW - 0.1)
    assert e1.run_maintenance().parts["claims_renewed"] == 0
    assert store.get(keys.owner_holder_key("w")) == before

    clock.advance(0.1)
    assert e1.run_maintenance().parts["claims_renewed"] == 1
    assert holder_of(store, "w") == {
        "engine_id": "e1",
        "epoch": 1,
        "expires_at": T0 + RENEW + TTL,
        "claimed_at": T0,
    }
    assert epoch_of(store, "w") == 1

    # Past the first holder's expiry judgment, but the claim was renewed: no takeover.
    clock.advance(expired_after(T0) + 0.001 - clock())
    assert e2.run_maintenance().parts["claims_reclaimed"] == 0
    assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
    assert counter(e2, "claim_attempts.takeover") == 0


@pytest.mark.parametrize("ending", ["completed", "failed"])
def test_self_terminal_commit_releases_the_holder_and_keeps_the_epoch(
    storage_factory: Opener, ending: str
) -> None:
    """Release at a self-terminal commit (complete, fail): holder deleted, epoch kept.

    The release is folded into the terminal batch, conditioned on this engine's holder bytes
    and its epoch; the claims index entry goes with it and the engine holds nothing after.
    """

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.wait_for_signal("go")
        if ending == "failed":
            raise ValueError("boom")
        return x

    journal = Journal()
    e1 = make_engine(
        storage_factory,
        {"flow": workflow("flow").execute(flow)},
        "e1",
        VirtualClock(),
        journal=journal,
    )
    store = storage_factory()
    e1.start("flow", 7, id="w")
    holder_bytes = store.get(keys.owner_holder_key("w"))
    e1.signal("w", "go")

    assert e1.describe("w").status == ending
    assert holder_of(store, "w") is None and e1.describe("w").owner is None
    assert epoch_of(store, "w") == 1
    assert not claim_indexed(store, "w")
    assert "w" not in e1.runtime.fence.claims  # type: ignore[attr-defined]
    terminal = [w for w in journal.by("e1", committed=True) if w.puts(keys.state_key("w"))][-1]
    assert decode(store.get(keys.state_key("w")))["status"] == ending  # type: ignore[arg-type]
    assert Delete(keys.owner_holder_key("w")) in terminal.ops
    assert not terminal.puts(keys.owner_epoch_key("w"))
    assert terminal.condition_on(keys.owner_holder_key("w")) == Condition(
        keys.owner_holder_key("w"), holder_bytes
    )
    assert step_fence(terminal, "w") == 1  # on the head, which carries the epoch
    e1.run_maintenance()
    assert counter(e1, "claims_active") == 0


def test_cancel_rotates_the_epoch_and_the_parked_owner_is_deposed_at_renewal(
    storage_factory: Opener,
) -> None:
    """Cancel (external terminal) rotates the epoch in its own batch and deletes the holder.

    A non-owner may cancel. The owner's next renewal then fails: it drops the claim, counts
    ``claim_renewal_failures`` and ``claim_attempts.deposed``, warns ``WorkflowClaimLost``, and
    none of its writes lands.
    """
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    store = storage_factory()
    e1.start("flow", 1, id="w")

    mark = journal.mark()
    e2.cancel("w")
    cancel = [w for w in landed_after(journal, "e2", mark) if w.puts(keys.state_key("w"))]
    assert len(cancel) == 1
    assert cancel[0].condition_on(keys.owner_epoch_key("w")) == Condition(
        keys.owner_epoch_key("w"), pack_epoch(1)
    )
    assert Put(keys.owner_epoch_key("w"), pack_epoch(2)) in cancel[0].ops
    assert Delete(keys.owner_holder_key("w")) in cancel[0].ops
    assert epoch_of(store, "w") == 2 and holder_of(store, "w") is None
    assert e1.describe("w").status == "cancelled"
    with pytest.raises(WorkflowCancelledError):
        e1.get_handle("w").result()

    mark = journal.mark()
    clock.advance(RENEW)
    with caught() as seen:
        e1.run_maintenance()
    assert of_category(seen, WorkflowClaimLost) and "'w'" in of_category(seen, WorkflowClaimLost)[0]
    assert counter(e1, "claim_renewal_failures") == 1
    assert counter(e1, "claim_attempts.deposed") == 1
    assert counter(e1, "claims_active") == 0
    assert _fires_only_the_close_children_timer(landed_after(journal, "e1", mark), "w")
    assert epoch_of(store, "w") == 2 and e1.describe("w").status == "cancelled"


@pytest.mark.parametrize("transition", ["cancel", "suspend", "timeout"])
def test_external_transitions_rotate_the_epoch_and_depose_the_parked_owner(
    storage_factory: Opener, transition: str
) -> None:
    """Every external transition (cancel, suspend, the execution-deadline timeout), made by a
    non-owner, rotates the epoch (1 -> 2) and deletes the holder in the batch that writes the
    new status; the owner is deposed at its next renewal and lands nothing."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    store = storage_factory()
    timeout = 10 if transition == "timeout" else None
    e1.start("flow", 1, id="w", execution_timeout=timeout)
    mark = journal.mark()
    if transition == "cancel":
        e2.cancel("w")
    elif transition == "suspend":
        e2.suspend("w")
    else:
        clock.advance(10)
        e2.run_maintenance()  # the deadline timer fires on e2
    status = {"cancel": "cancelled", "suspend": "suspended", "timeout": "timed-out"}[transition]
    assert e2.describe("w").status == status
    moved = [w for w in landed_after(journal, "e2", mark) if w.puts(keys.state_key("w"))]
    assert len(moved) == 1
    assert Put(keys.owner_epoch_key("w"), pack_epoch(2)) in moved[0].ops
    assert Delete(keys.owner_holder_key("w")) in moved[0].ops
    assert moved[0].condition_on(keys.owner_epoch_key("w")) == Condition(
        keys.owner_epoch_key("w"), pack_epoch(1)
    )
    assert epoch_of(store, "w") == 2 and holder_of(store, "w") is None

    mark = journal.mark()
    clock.advance(RENEW)
    with caught() as seen:
        e1.run_maintenance()
    assert of_category(seen, WorkflowClaimLost)
    assert counter(e1, "claim_attempts.deposed") == 1
    assert _fires_only_the_close_children_timer(landed_after(journal, "e1", mark), "w")
    assert e1.describe("w").status == status and calls.count("b") == 0


def _fires_only_the_close_children_timer(writes: list[Any], workflow_id: str) -> bool:
    """A deposed engine writes nothing of the run. Its pass may fire the close-children timer
    an end from outside arms, due at once (a child started while the end was in flight is
    closed by it, ADR 0047): deleting a fired timer is any engine's to do."""
    return all(
        not write.conditions
        and isinstance(op, Delete)
        and op.key.partition.startswith("timers#")
        and op.key.sort.endswith(f"#{workflow_id}#close-children")
        for write in writes
        for op in write.ops
    )


@pytest.mark.parametrize("resumer", ["e1", "e2"])
def test_resume_of_a_suspended_run_acquires_the_next_epoch_in_its_batch(
    storage_factory: Opener, resumer: str
) -> None:
    """Resume of a suspended run is claim-acquiring: the batch moving it back to running also
    writes epoch + 1 and this engine's holder (holder absent, epoch as read). It works on the
    engine that suspended it right away (the downstream 0.23.1 suspend defect is absent) and on
    another engine; the run then completes normally."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    engines = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    )
    store = storage_factory()
    engines["e1"].start("flow", 1, id="w")
    engines["e1"].suspend("w")
    assert epoch_of(store, "w") == 2 and holder_of(store, "w") is None
    mark = journal.mark()
    engines[resumer].resume("w")
    resumed = next(w for w in landed_after(journal, resumer, mark) if w.puts(keys.state_key("w")))
    # a claim moves the run's head, which carries the epoch (ADR 0037)
    head_key = keys.owner_head_key("w")
    put = next(op for op in resumed.ops if isinstance(op, Put) and op.key == head_key)
    assert Head.from_bytes(put.value).epoch == 3
    assert resumed.puts(keys.owner_holder_key("w"))
    assert resumed.condition_on(keys.owner_holder_key("w")) == Condition(
        keys.owner_holder_key("w"), None
    )
    assert step_fence(resumed, "w") == 2
    assert epoch_of(store, "w") == 3
    assert engines[resumer].describe("w").owner == {
        "engine_id": resumer,
        "epoch": 3,
        "expires_at": T0 + TTL,
        "claimed_at": T0,
    }
    engines[resumer].signal("w", "go", 5)
    assert engines[resumer].get_handle("w").result() == 70
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_delayed_start_acquires_its_claim_when_it_activates(storage_factory: Opener) -> None:
    """A delayed start is created unclaimed (no epoch, no holder); when its timer fires, the
    batch moving it pending -> running acquires epoch 1 for the engine that fired it, which
    then drives it."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    store = storage_factory()
    e1.start("flow", 1, id="w", start_after=10)
    assert e1.describe("w").status == "pending"
    assert epoch_of(store, "w") == 0 and holder_of(store, "w") is None
    assert not claim_indexed(store, "w")
    clock.advance(10)
    mark = journal.mark()
    e2.run_maintenance()
    activated = next(w for w in landed_after(journal, "e2", mark) if w.puts(keys.state_key("w")))
    assert Put(keys.owner_epoch_key("w"), pack_epoch(1)) in activated.ops
    assert activated.puts(keys.owner_holder_key("w"))
    assert e2.describe("w").owner["engine_id"] == "e2"  # type: ignore[index]
    assert calls.count("a") == 1 and e2.describe("w").status == "running"
    assert fencing_violations(journal) == []


def test_cancel_from_a_non_owner_deposes_the_running_owner_whose_next_write_fails(
    storage_factory: Opener,
) -> None:
    """A cancel from a non-owner while the owner runs an activity fences the owner out.

    The owner's step commit (its next write) is refused by the rotated epoch; the owner stops
    that workflow only (``EngineDeposedError`` never reaches the workflow code or the caller),
    warns ``WorkflowClaimLost``, runs nothing further, and the run stays cancelled.
    """
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    engines: dict[str, Engine] = {}
    seen_by_workflow: list[BaseException] = []

    def a(x: int) -> int:
        calls.add("a", x)
        engines["e2"].cancel("w")  # another engine cancels while this activity runs
        return x + 1

    def flow(ctx: Any, x: int) -> Gen:
        try:
            y = yield ctx.run("a", x)
        except Exception as exc:
            seen_by_workflow.append(exc)
            raise
        z = yield ctx.run("b", y)
        return z

    def other(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("b", x)
        return y

    flows = {
        "flow": workflow("flow").activities(a=a, b=calls.recorder("b")).execute(flow),
        "other": workflow("other").activities(b=calls.recorder("b")).execute(other),
    }
    engines.update(make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal))
    store = storage_factory()
    e1 = engines["e1"]

    with caught() as seen:
        handle = e1.start("flow", 1, id="w")  # returns normally: deposition stays internal
    assert of_category(seen, WorkflowClaimLost)
    assert e1.describe("w").status == "cancelled"
    refused = refused_step_writes(journal, "e1", "w")
    assert len(refused) == 1
    assert step_fence(refused[0], "w") == 1  # the step's head put, on the epoch cancel rotated
    assert op_slots(store, "w") == []
    assert calls.count("a") == 1 and calls.count("b") == 0
    assert seen_by_workflow == []
    assert not any(isinstance(e, EngineDeposedError) for e in seen_by_workflow)
    assert counter(e1, "claim_attempts.deposed") == 1
    assert "w" not in e1.runtime.fence.claims  # type: ignore[attr-defined]
    assert epoch_of(store, "w") == 2
    with pytest.raises(WorkflowCancelledError):
        handle.result()
    assert fencing_violations(journal) == []

    # Only that workflow stopped: the same engine still drives others.
    assert e1.start("other", 5, id="o").result() == 5
    assert calls.count("b") == 1


# -- explicit resume, handoff, takeover -----------------------------------------------------------


def test_resume_of_a_workflow_held_elsewhere_raises_claim_unavailable(
    storage_factory: Opener,
) -> None:
    """``engine.resume(id)`` on a workflow another engine holds raises
    ``WorkflowClaimUnavailableError(workflow_id, held_by)`` and writes nothing."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    e1.start("flow", 1, id="w")
    mark = journal.mark()
    with pytest.raises(WorkflowClaimUnavailableError) as raised:
        e2.resume("w")
    assert raised.value.workflow_id == "w" and raised.value.held_by == "e1"
    assert landed_after(journal, "e2", mark) == []
    assert holder_of(storage_factory(), "w")["engine_id"] == "e1"  # type: ignore[index]


class FailsStepCommitsOnce(RecordingStorage):
    """Raises a transient ``StorageUnavailableError`` on the first step commit, once: a put
    of an op record, or a head put carrying a step (ADR 0037)."""

    failures = 1

    def _conditional_batch(self, conditions: Any, ops: Any) -> bool:
        if self.failures and any(
            isinstance(op, Put)
            and (
                op.key.sort.startswith(keys.OP_PREFIX)
                or (op.key.sort == keys.OWNER_HEAD and Head.from_bytes(op.value).slot)
            )
            for op in ops
        ):
            self.failures -= 1
            raise StorageUnavailableError("transient: the request timed out before sending")
        return super()._conditional_batch(conditions, ops)


def test_the_owner_can_resume_after_a_transient_storage_error(storage_factory: Opener) -> None:
    """A transient storage error in a step commit after the start committed is logged, not
    raised (the start landed), and the engine still owns the run: resuming it at once on
    that engine drives it to completion on the same epoch, with no wait for an expiry."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("a", x)
        return y

    handle = FailsStepCommitsOnce(storage_factory(), "e1", journal)
    e1 = Engine.create(
        handle,
        {"flow": workflow("flow").activities(a=calls.recorder("a")).execute(flow)},
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
    )
    e1.start("flow", 4, id="w")
    assert e1.describe("w").status == "running"
    assert holder_of(storage_factory(), "w")["engine_id"] == "e1"  # type: ignore[index]
    assert e1.resume("w") == "completed"
    assert e1.get_handle("w").result() == 4
    assert epoch_of(storage_factory(), "w") == 1
    assert fencing_violations(journal) == []


def test_two_engines_resuming_one_workflow_exactly_one_wins(storage_factory: Opener) -> None:
    """Two engines resume the same released workflow at once: exactly one acquires and drives
    it (epoch 1 -> 2), the other gets ``WorkflowClaimUnavailableError`` naming the winner."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    loser_done = threading.Event()

    def gate(x: int) -> int:
        calls.add("gate", threading.current_thread().name)
        loser_done.wait(30)  # hold the claim until the other resume has failed
        return x * 2

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.sleep(10)
        y = yield ctx.run("gate", x)
        return y

    flows = {"flow": workflow("flow").activities(gate=gate).execute(flow)}
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal)
    racers = make_engines(storage_factory, flows, ["e2", "e3"], clock, journal=journal)
    e1.start("flow", 21, id="w")
    e1.close()  # graceful: releases the parked claim
    store = storage_factory()
    assert holder_of(store, "w") is None and epoch_of(store, "w") == 1
    clock.advance(10)

    barrier = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def race(name: str) -> None:
        barrier.wait()
        try:
            outcomes[name] = racers[name].resume("w")
        except WorkflowClaimUnavailableError as exc:
            outcomes[name] = exc
            loser_done.set()

    threads = [threading.Thread(target=race, args=(n,), name=n) for n in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    loser_done.set()

    winners = [n for n, o in outcomes.items() if o == "completed"]
    losers = [n for n, o in outcomes.items() if isinstance(o, WorkflowClaimUnavailableError)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    error = outcomes[losers[0]]
    assert error.workflow_id == "w" and error.held_by == winners[0]
    assert calls.log == [("gate", winners[0])]
    assert racers[losers[0]].get_handle("w").result() == 42
    assert epoch_of(store, "w") == 2
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_graceful_handoff_successor_acquires_at_epoch_plus_one_and_no_step_runs_twice(
    storage_factory: Opener,
) -> None:
    """Graceful handoff: the owner closes (holder released, epoch kept at 1); another engine's
    wake at the same instant acquires at epoch 2 and carries on; every step ran once."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        a = yield ctx.run("a", x)
        g1 = yield ctx.wait_for_signal("go")
        b = yield ctx.run("b", a + g1)
        g2 = yield ctx.wait_for_signal("go")
        c = yield ctx.run("c", b + g2)
        return c

    flows = {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a"), b=calls.recorder("b"), c=calls.recorder("c"))
        .execute(flow)
    }
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal).values()
    store = storage_factory()
    e1.start("flow", 1, id="w")
    e1.close()
    assert holder_of(store, "w") is None and epoch_of(store, "w") == 1

    e2.signal("w", "go", 10)  # same instant: no clock advance
    assert e2.describe("w").owner == {
        "engine_id": "e2",
        "epoch": 2,
        "expires_at": T0 + TTL,
        "claimed_at": T0,
    }
    assert epoch_of(store, "w") == 2
    e2.signal("w", "go", 100)
    assert e2.get_handle("w").result() == 111
    assert [calls.count(n) for n in "abc"] == [1, 1, 1]
    assert holder_of(store, "w") is None and epoch_of(store, "w") == 2
    assert rewritten_op_records(journal) == {} and fencing_violations(journal) == []


def crash_once_flow(calls: Calls) -> Any:
    """a (the process dies inside its first attempt) -> b."""
    crashed = threading.Event()

    def a(x: int) -> int:
        calls.add("a", x)
        if not crashed.is_set():
            crashed.set()
            raise SimulatedCrash("the engine process died inside activity a")
        return x + 1

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("a", x)
        z = yield ctx.run("b", y)
        return z

    return {"flow": workflow("flow").activities(a=a, b=calls.recorder("b")).execute(flow)}


def crash_engine(engine: Engine) -> None:
    """Kill an engine built with a journal: its storage handle refuses everything from now on."""
    storage = engine.runtime.storage
    assert isinstance(storage, RecordingStorage)
    storage.kill()


def test_crash_takeover_exactly_at_and_just_after_the_expiry_boundary(
    storage_factory: Opener,
) -> None:
    """Expire is a strict judgment: ``expires_at + 2 x renew < now``.

    An owner dies mid-activity at T0 (holder expires T0+30). At exactly T0+40 another engine's
    maintenance does not take over; 1 ms later it takes over (epoch 2, metric ``takeover``) and
    drives the run to completion in the same pass.
    """
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = crash_once_flow(calls)
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal).values()
    store = storage_factory()
    with pytest.raises(SimulatedCrash):
        e1.start("flow", 1, id="w")
    crash_engine(e1)
    assert holder_of(store, "w")["expires_at"] == T0 + TTL  # type: ignore[index]

    clock.advance(expired_after(T0) - T0)  # exactly at the boundary
    report = e2.run_maintenance()
    assert report.parts["claims_reclaimed"] == 0
    assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
    assert epoch_of(store, "w") == 1 and counter(e2, "claim_attempts.takeover") == 0

    clock.advance(0.001)  # just after
    report = e2.run_maintenance()
    assert report.parts["claims_reclaimed"] == 1
    assert counter(e2, "claim_attempts.takeover") == 1
    assert e2.get_handle("w").result() == 2
    assert epoch_of(store, "w") == 2 and holder_of(store, "w") is None
    assert calls.count("a") == 2 and calls.count("b") == 1  # a re-ran: its owner died inside it
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_concurrent_reclaims_of_one_expired_claim_have_one_winner(storage_factory: Opener) -> None:
    """Takeover is a CAS on the stale holder and epoch: three engines reclaiming the same
    expired claim at once produce exactly one takeover (epoch 1 -> 2) and one completion."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = crash_once_flow(calls)
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal)
    others = make_engines(storage_factory, flows, ["e2", "e3", "e4"], clock, journal=journal)
    with pytest.raises(SimulatedCrash):
        e1.start("flow", 1, id="w")
    crash_engine(e1)
    clock.advance(TTL + GRACE + 1)

    barrier = threading.Barrier(len(others))
    errors: list[BaseException] = []

    def reclaim(engine: Engine) -> None:
        barrier.wait()
        try:
            engine.run_maintenance()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reclaim, args=(e,)) for e in others.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sum(counter(e, "claim_attempts.takeover") for e in others.values()) == 1
    store = storage_factory()
    assert epoch_of(store, "w") == 2
    assert decode(store.get(keys.state_key("w")))["status"] == "completed"  # type: ignore[arg-type]
    assert calls.count("a") == 2 and calls.count("b") == 1
    assert fencing_violations(journal) == [] and rewritten_op_records(journal) == {}


def test_takeover_cooldown_after_a_deposition(storage_factory: Opener) -> None:
    """Anti-thrash: after losing a claim (failed renewal) an engine skips that workflow's
    takeover for ``renew_interval`` (metric ``backoff_skipped``), then takes it over; a
    successful takeover clears the cooldown, so the next loss starts again at one interval."""
    clock, calls = VirtualClock(), Calls()
    e1, e2, e3 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2", "e3"], clock
    ).values()
    store = storage_factory()
    e1.start("flow", 1, id="w")

    def lose_claim_of_e1(thief: Engine) -> float:
        """e1 falls silent; ``thief`` takes the claim over, then falls silent in turn."""
        stale_at = holder_of(store, "w")["expires_at"]  # type: ignore[index]
        clock.advance(stale_at + GRACE + 0.001 - clock())
        assert thief.run_maintenance().parts["claims_reclaimed"] == 1
        thief_expiry = holder_of(store, "w")["expires_at"]  # type: ignore[index]
        clock.advance(thief_expiry + GRACE + 0.001 - clock())
        return clock()

    for thief, epoch_after in ((e2, 3), (e3, 5)):
        lost_at = lose_claim_of_e1(thief)
        skipped = counter(e1, "claim_attempts.backoff_skipped")
        with caught() as seen:
            report = e1.run_maintenance()  # renewal fails: deposed; cooldown starts
        assert of_category(seen, WorkflowClaimLost)
        assert report.parts["claims_reclaimed"] == 0
        assert counter(e1, "claim_attempts.backoff_skipped") == skipped + 1

        clock.advance(lost_at + RENEW - 0.01 - clock())
        assert e1.run_maintenance().parts["claims_reclaimed"] == 0
        assert counter(e1, "claim_attempts.backoff_skipped") == skipped + 2

        clock.advance(0.011)
        assert e1.run_maintenance().parts["claims_reclaimed"] == 1
        assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
        assert epoch_of(store, "w") == epoch_after
    assert counter(e1, "claim_renewal_failures") == 2
    assert counter(e1, "claim_attempts.deposed") == 2


@pytest.mark.parametrize(
    ("depositions", "cooldown"), [(1, RENEW), (2, 2 * RENEW), (4, 8 * RENEW), (6, 4 * TTL)]
)
def test_consecutive_depositions_double_the_cooldown_up_to_four_ttls(
    storage_factory: Opener, depositions: int, cooldown: float
) -> None:
    """The cooldown doubles per deposition without a successful claim in between, from one
    renew interval up to ``4 x ttl``. (Depositions are fed through the ``deposed`` hook the
    dispatcher calls on ``EngineDeposedError``.)"""
    clock, calls = VirtualClock(), Calls()
    e1, e2 = make_engines(storage_factory, signal_flow(calls), ["e1", "e2"], clock).values()
    e2.start("flow", 1, id="w")  # e2 holds it, then falls silent
    clock.advance(TTL + GRACE + 1)
    with caught():
        for _ in range(depositions):
            e1.runtime.fence.deposed("w")
    lost_at = clock()

    clock.advance(cooldown - 0.01)
    assert e1.run_maintenance().parts["claims_reclaimed"] == 0
    assert counter(e1, "claim_attempts.backoff_skipped") == 1
    clock.advance(lost_at + cooldown + 0.001 - clock())
    assert e1.run_maintenance().parts["claims_reclaimed"] == 1
    assert counter(e1, "claim_attempts.takeover") == 1


class RefusingClaims(RecordingStorage):
    """Refuses (as a lost race would) every conditional write that claims a holder."""

    refusing = True
    refused = 0

    def _conditional_batch(self, conditions: Any, ops: Any) -> bool:
        if self.refusing and any(
            isinstance(op, Put) and op.key.sort == keys.OWNER_HOLDER for op in ops
        ):
            self.refused += 1
            return False
        return super()._conditional_batch(conditions, ops)


def test_takeover_gives_up_after_five_lost_races_per_pass(storage_factory: Opener) -> None:
    """Takeover re-reads and retries a lost CAS at most 5 times per pass (metric
    ``lost_race``), and tries again on the next pass."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1 = make_engine(storage_factory, signal_flow(calls), "e1", clock)
    e1.start("flow", 1, id="w")
    handle = RefusingClaims(storage_factory(), "e2", journal)
    e2 = Engine.create(
        handle,
        signal_flow(calls),
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e2",
    )
    clock.advance(TTL + GRACE + 1)
    assert e2.run_maintenance().parts["claims_reclaimed"] == 0
    assert handle.refused == 5 and counter(e2, "claim_attempts.lost_race") == 5
    assert e2.run_maintenance().parts["claims_reclaimed"] == 0
    assert handle.refused == 10 and counter(e2, "claim_attempts.lost_race") == 10
    handle.refusing = False
    assert e2.run_maintenance().parts["claims_reclaimed"] == 1
    assert holder_of(storage_factory(), "w")["engine_id"] == "e2"  # type: ignore[index]


# -- fencing --------------------------------------------------------------------------------------


def test_every_owner_write_is_fenced_on_the_epoch_current_at_commit(
    storage_factory: Opener,
) -> None:
    """Every workflow-scoped owner write (op, pending and attempt records) carries the epoch
    condition, and each landed under the epoch its writer held: across a retry, a sleep, a
    signal wait, a graceful handoff and a crash takeover. No op record is written twice."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    failed_once = threading.Event()

    def flaky(x: int) -> int:
        calls.add("flaky", x)
        if not failed_once.is_set():
            failed_once.set()
            raise ConnectionError("transient")
        return x + 1

    crashed = threading.Event()

    def fragile(x: int) -> int:
        calls.add("fragile", x)
        if not crashed.is_set():
            crashed.set()
            raise SimulatedCrash("owner died")
        return x

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("flaky", x, retry=RetryPolicy(initial_backoff=2))
        yield ctx.sleep(5)
        g = yield ctx.wait_for_signal("go")
        both = yield ctx.all(ctx.run("flaky", y), ctx.run("flaky", g))
        z = yield ctx.run("fragile", sum(both))
        return z

    flows = {"flow": workflow("flow").activities(flaky=flaky, fragile=fragile).execute(flow)}
    e1, e2, e3 = make_engines(
        storage_factory, flows, ["e1", "e2", "e3"], clock, journal=journal
    ).values()
    e1.start("flow", 1, id="w")  # attempt 1 fails: attempt record + retry timer
    clock.advance(2)
    e1.run_maintenance()  # retry succeeds, sleep parks
    e1.close()  # graceful release
    clock.advance(5)
    e2.run_maintenance()  # e2 acquires at the sleep timer (epoch 2), parks on the signal
    with pytest.raises(SimulatedCrash):
        e2.signal("w", "go", 10)  # e2 dies inside "fragile"
    crash_engine(e2)
    clock.advance(TTL + GRACE + 1)
    e3.run_maintenance()  # takeover (epoch 3) finishes the run
    assert e3.get_handle("w").result() == 2 + 1 + 10 + 1
    assert epoch_of(storage_factory(), "w") == 3

    owner_puts = [
        w
        for w in journal.writes
        if w.committed
        and any(
            isinstance(op, Put)
            and op.key.partition == keys.workflow_partition("w")
            and op.key.sort.startswith((keys.OP_PREFIX, keys.PENDING_PREFIX, keys.ATTEMPT_PREFIX))
            for op in w.ops
        )
    ]
    assert {w.engine for w in owner_puts} == {"e1", "e2", "e3"}
    # A plain step commits on the run's head (ADR 0037), written out later by a lone put that
    # commits nothing; every other owner write is fenced on the head, which carries the epoch.
    step_writes = [w for w in journal.writes if w.committed and step_commits(w)]
    assert {w.engine for w in step_writes} == {"e1", "e2", "e3"}
    assert all(step_fence(w, "w") is not None for w in step_writes)
    assert all(step_fence(w, "w") is not None for w in owner_puts if not is_write_out(w))
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}


# -- wake-ownership checks ------------------------------------------------------------------------


def start_parked(
    storage_factory: Opener,
    clock: VirtualClock,
    journal: Journal,
    calls: Calls,
    e2_clock: Any = None,
) -> tuple[Engine, Engine, Storage]:
    """e1 starts ``w`` (it parks on "go", claim held) and then falls silent; e2 stands by."""
    flows = signal_flow(calls)
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal)
    e2 = make_engine(storage_factory, flows, "e2", e2_clock or clock, journal=journal)
    e1.start("flow", 1, id="w")
    return e1, e2, storage_factory()


def test_signal_wake_on_a_stale_claim_is_discarded_with_a_warning(storage_factory: Opener) -> None:
    """Wake check: before a signal wake drives a parked workflow the engine re-reads the holder;
    a stale claim (taken over elsewhere) is dropped, ``WorkflowWakeDiscarded`` names the wake
    kind, nothing is driven here, and the true owner's next pass delivers the signal."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2, _ = start_parked(storage_factory, clock, journal, calls)
    clock.advance(TTL + GRACE + 0.001)
    assert e2.run_maintenance().parts["claims_reclaimed"] == 1
    mark = journal.mark()
    with caught() as seen:
        e1.signal("w", "go", 5)
    discarded = of_category(seen, WorkflowWakeDiscarded)
    assert len(discarded) == 1 and "'w'" in discarded[0] and "signal" in discarded[0]
    landed = landed_after(journal, "e1", mark)
    assert all(
        not op.key.sort.startswith((keys.OP_PREFIX, keys.STATE)) for w in landed for op in w.ops
    )
    assert "w" not in e1.runtime.fence.claims  # type: ignore[attr-defined]
    assert calls.count("b") == 0
    report = e2.run_maintenance()
    assert report.parts["signal_polls_woken"] == 1
    assert e2.get_handle("w").result() == 70
    assert fencing_violations(journal) == []


def test_explicit_resume_on_a_stale_claim_is_discarded_and_raises(storage_factory: Opener) -> None:
    """An explicit ``resume`` on a stale claim: wake discarded with a warning, and the caller
    gets ``WorkflowClaimUnavailableError`` naming the engine that holds it now."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2, _ = start_parked(storage_factory, clock, journal, calls)
    clock.advance(TTL + GRACE + 0.001)
    e2.run_maintenance()
    mark = journal.mark()
    with caught() as seen, pytest.raises(WorkflowClaimUnavailableError) as raised:
        e1.resume("w")
    assert raised.value.workflow_id == "w" and raised.value.held_by == "e2"
    assert of_category(seen, WorkflowWakeDiscarded)
    assert landed_after(journal, "e1", mark) == []


def test_owner_poll_on_a_claim_lost_to_clock_skew_is_discarded(storage_factory: Opener) -> None:
    """Clock skew beyond the documented bound lets a fast-clocked engine take over a claim its
    owner just renewed; the owner's signal poll then re-reads the holder, discards the wake with
    a warning, and lands no write: the wake check is the safety net, the epoch the backstop."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    skewed = SkewedClock(clock, TTL + GRACE + 1)
    e1, e2, _ = start_parked(storage_factory, clock, journal, calls, skewed)
    assert e2.run_maintenance().parts["claims_reclaimed"] == 1  # e2's clock says it expired
    clock.advance(1)
    make_engine(storage_factory, signal_flow(calls), "e3", clock).signal("w", "go", 5)
    mark = journal.mark()
    with caught() as seen:
        e1.run_maintenance()  # renewal not due yet on e1's clock: the poll finds the signal
    assert of_category(seen, WorkflowWakeDiscarded)
    assert landed_after(journal, "e1", mark) == []
    assert op_slots(storage_factory(), "w") == [keys.step_slot(0)]
    assert calls.count("b") == 0
    assert fencing_violations(journal) == []


def test_wake_check_compares_the_epoch_not_only_the_engine_id(storage_factory: Opener) -> None:
    """The wake check compares the full holder (engine id AND epoch): an old instance of an
    engine id whose claim was taken over by a new instance with the same id (epoch 2) must not
    drive the workflow on its stale epoch-1 claim."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    flows = signal_flow(calls)
    old = Engine.create(
        RecordingStorage(storage_factory(), "e1-old", journal),
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
    )
    new = Engine.create(
        RecordingStorage(storage_factory(), "e1-new", journal),
        flows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
    )
    old.start("flow", 1, id="w")
    clock.advance(TTL + GRACE + 0.001)
    assert new.run_maintenance().parts["claims_reclaimed"] == 1
    holder = holder_of(storage_factory(), "w")
    assert holder is not None and holder["engine_id"] == "e1" and holder["epoch"] == 2

    mark = journal.mark()
    with caught() as seen:
        old.signal("w", "go", 5)
    assert of_category(seen, WorkflowWakeDiscarded)
    assert all(not w.puts(keys.op_key("w", keys.step_slot(2))) for w in journal.since(mark))
    assert calls.count("b") == 0
    new.run_maintenance()
    assert new.get_handle("w").result() == 70


def test_non_owner_discards_wakes_with_a_warning_naming_the_wake_kind(
    storage_factory: Opener,
) -> None:
    """Every discarded wake warns: a signal wake and a fired sleep timer on an engine that does
    not hold the running workflow are both discarded with ``WorkflowWakeDiscarded`` naming the
    workflow and the wake kind (``signal``, ``sleep``)."""
    clock, calls = VirtualClock(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.sleep(10)
        g = yield ctx.wait_for_signal("go")
        return x + g

    flows = {"flow": workflow("flow").execute(flow)}
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock).values()
    e1.start("flow", 1, id="w")
    with caught() as seen:
        e2.signal("w", "go", 5)
    signal_warnings = of_category(seen, WorkflowWakeDiscarded)
    clock.advance(10)
    with caught() as seen:
        e2.run_maintenance()
    sleep_warnings = of_category(seen, WorkflowWakeDiscarded)
    assert any("'w'" in m and "signal" in m for m in signal_warnings), signal_warnings
    assert any("'w'" in m and "sleep" in m for m in sleep_warnings), sleep_warnings
    assert calls.log == []


# -- timers and signals across engines ------------------------------------------------------------


def test_sleep_timer_on_a_non_owner_is_retained_while_running_and_collected_once_terminal(
    storage_factory: Opener,
) -> None:
    """Timer retain-or-collect: a due sleep timer fired on a non-owner is retained (the key
    stays, the run is not driven) while the workflow runs, and collected (deleted) by the same
    engine once the workflow is terminal. The owner's own pass, had it come first, does the wake."""
    clock, calls = VirtualClock(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.sleep(10)
        y = yield ctx.run("b", x)
        return y

    flows = {"flow": workflow("flow").activities(b=calls.recorder("b")).execute(flow)}
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock).values()
    store = storage_factory()
    e1.start("flow", 3, id="w")
    timers = timers_of(store, "w")
    assert len(timers) == 1

    clock.advance(10)
    report = e2.run_maintenance()
    assert report.parts.get("timers_retained") == 1 and report.timers_fired == 0
    assert timers_of(store, "w") == timers and calls.count("b") == 0
    assert e2.describe("w").status == "running"

    e2.cancel("w")
    report = e2.run_maintenance()
    # the sleep timer, collected, and the close-children timer the cancel armed (ADR 0047)
    assert report.timers_fired == 2 and "timers_retained" not in report.parts
    assert timers_of(store, "w") == [] and calls.count("b") == 0


def test_sleep_timer_retained_by_a_non_owner_is_fired_by_the_owner(storage_factory: Opener) -> None:
    """The retained timer stays for the owner: the owner's next pass performs the real wake and
    deletes it."""
    clock, calls = VirtualClock(), Calls()

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.sleep(10)
        y = yield ctx.run("b", x)
        return y

    flows = {"flow": workflow("flow").activities(b=calls.recorder("b")).execute(flow)}
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock).values()
    store = storage_factory()
    e1.start("flow", 3, id="w")
    clock.advance(10)
    e2.run_maintenance()
    report = e1.run_maintenance()
    assert report.timers_fired == 1
    assert e1.get_handle("w").result() == 3 and calls.count("b") == 1
    assert timers_of(store, "w") == []


def test_signal_sent_to_a_non_owner_wakes_the_workflow_within_one_maintenance_pass(
    storage_factory: Opener,
) -> None:
    """Owner-side polling: a signal delivered through a non-owner is buffered (the non-owner
    does not drive); the owner's next maintenance pass, with no clock advance, finds it
    (``report.parts["signal_polls_woken"]``) and drives the run to completion."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, signal_flow(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    e1.start("flow", 1, id="w")
    mark = journal.mark()
    e2.signal("w", "go", 5)
    assert all(
        not op.key.sort.startswith(keys.OP_PREFIX)
        for w in landed_after(journal, "e2", mark)
        for op in w.ops
    )
    assert e2.describe("w").status == "running" and calls.count("b") == 0

    report = e1.run_maintenance()
    assert report.parts["signal_polls_woken"] == 1
    assert e1.describe("w").status == "completed"
    assert e2.get_handle("w").result() == 70 and calls.count("b") == 1


def test_owner_poll_wakes_only_workflows_whose_awaited_signal_arrived(
    storage_factory: Opener,
) -> None:
    """The owner polls the signal names each parked workflow awaits: a buffered signal of
    another name wakes nothing."""
    clock, calls = VirtualClock(), Calls()
    e1, e2 = make_engines(storage_factory, signal_flow(calls), ["e1", "e2"], clock).values()
    e1.start("flow", 1, id="w1")
    e1.start("flow", 1, id="w2")
    e2.signal("w1", "other", 1)
    e2.signal("w2", "go", 1)
    report = e1.run_maintenance()
    assert report.parts["signal_polls_woken"] == 1
    assert e1.describe("w1").status == "running"
    assert e1.describe("w2").status == "completed"


def test_handle_on_another_engine_settles_with_a_result_completed_elsewhere(
    storage_factory: Opener,
) -> None:
    """Cross-engine ``handle.result()``: a handle on engine B waiting for a run owned by A
    returns A's result once A completes it (and raises A's failure for a failed run)."""
    clock = VirtualClock()

    def flow(ctx: Any, x: int) -> Gen:
        g = yield ctx.wait_for_signal("go")
        if g == "fail":
            raise ValueError("bad input")
        return x + g

    flows = {"flow": workflow("flow").execute(flow)}
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock).values()
    e1.start("flow", 1, id="ok")
    e1.start("flow", 1, id="bad")
    waiting = e2.get_handle("ok")
    with pytest.raises(TimeoutError):
        waiting.result()  # manual mode: "check now"

    outcome: list[Any] = []

    def wait() -> None:
        try:
            outcome.append(waiting.result(timeout=30))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    e1.signal("ok", "go", 41)
    waiter.join(30)
    assert outcome == [42]

    e1.signal("bad", "go", "fail")
    with pytest.raises(WorkflowFailedError):
        e2.get_handle("bad").result()
    with pytest.raises(WorkflowNotRunningError):
        e2.signal("bad", "go", 1)


# -- maintenance order ----------------------------------------------------------------------------


def test_maintenance_runs_ownership_before_timers(storage_factory: Opener) -> None:
    """One pass, in order: renew held claims, reclaim expired ones (and drive them), poll the
    buffered signals of parked owned runs, then fire due timers. The report carries
    ``claims_renewed``, ``claims_reclaimed`` and ``signal_polls_woken``; the journal shows the
    renewals, then the takeover, then the poll-driven step, then the timer-driven step."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()

    def napper(ctx: Any, x: int) -> Gen:
        yield ctx.sleep(TTL + GRACE + 1)
        y = yield ctx.run("b", x)
        return y

    flows = {
        **signal_flow(calls),
        "napper": workflow("napper").activities(b=calls.recorder("b")).execute(napper),
    }
    e1, e2 = make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal).values()
    e1.start("flow", 1, id="stranded")  # e1 falls silent: e2 will reclaim it
    e2.start("napper", 1, id="sleeper")  # e2's own claim; its timer falls due with the reclaim
    e2.start("flow", 1, id="polled")  # e2's own claim, parked on "go"
    clock.advance(TTL + GRACE + 1)
    e1.signal("polled", "go", 5)  # buffered through a non-owner
    mark = journal.mark()
    report = e2.run_maintenance()
    assert set(report.parts) >= {"claims_renewed", "claims_reclaimed", "signal_polls_woken"}
    assert report.parts["claims_renewed"] == 2 and report.parts["claims_reclaimed"] == 1
    assert report.parts["signal_polls_woken"] == 1
    assert report.timers_fired >= 1
    writes = landed_after(journal, "e2", mark)

    def first(key: Any) -> int:
        return next(i for i, w in enumerate(writes) if w.puts(key))

    renewals = max(first(keys.owner_holder_key("sleeper")), first(keys.owner_holder_key("polled")))
    takeover = first(keys.owner_holder_key("stranded"))
    polled = first(keys.op_key("polled", keys.step_slot(1)))
    timed = first(keys.op_key("sleeper", keys.step_slot(0)))
    assert renewals < takeover < polled < timed
    assert e2.get_handle("sleeper").result() == 1
    assert e2.get_handle("polled").result() == 70


def test_claim_attempt_metrics_are_counted_by_outcome(storage_factory: Opener) -> None:
    """Metrics: ``claim_attempts.acquired`` for the acquire of an explicit resume,
    ``takeover`` for a reclaim, ``claim_renewal_failures`` and ``deposed`` for a lost claim,
    and the ``claims_active`` gauge after each pass (``lost_race`` and ``backoff_skipped`` are
    pinned by the takeover tests above)."""
    clock, calls = VirtualClock(), Calls()
    e1, e2 = make_engines(storage_factory, signal_flow(calls), ["e1", "e2"], clock).values()
    e1.start("flow", 1, id="a")
    e1.start("flow", 1, id="b")
    e1.run_maintenance()
    assert counter(e1, "claims_active") == 2
    with e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        pass  # exit releases both parked claims
    assert holder_of(storage_factory(), "a") is None
    e1_acquired = counter(e1, "claim_attempts.acquired")
    e2.resume("a")
    e1.resume("b")
    assert counter(e2, "claim_attempts.acquired") == 1
    assert counter(e1, "claim_attempts.acquired") == e1_acquired + 1

    clock.advance(TTL + GRACE + 1)  # e1 falls silent: its claim on "b" expires
    e2.run_maintenance()
    assert counter(e2, "claim_attempts.takeover") == 1
    assert counter(e2, "claims_active") == 2
    with caught() as seen:
        e1.run_maintenance()
    assert of_category(seen, WorkflowClaimLost)
    assert counter(e1, "claim_renewal_failures") == 1
    assert counter(e1, "claim_attempts.deposed") == 1
    assert counter(e1, "claims_active") == 0
