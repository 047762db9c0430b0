"""Liveness under ``workflow-lease``: a claim on a run nobody drives never strands it.

A drive that fails on a transient storage fault leaves the run ``running`` and, under
workflow-lease, claimed. Two ways that used to strand it for ever: a long-lived engine keeps
renewing the claim (so nobody takes it over) but never drives the run again; and an
invocation scope releases the claim at its exit (so no claim expires) with no timer left.
The run's wake-up timer (docs/decisions/0009-wake-up-until-parked.md) covers both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fault_support import FlakyStorage, step_commit
from ownership_support import (
    GRACE,
    RENEW,
    T0,
    TTL,
    Opener,
    epoch_of,
    holder_of,
    layout_2,
    make_engine,
    timers_of,
)

from weft_serverless import RetryPolicy, workflow
from weft_serverless.codec import decode, encode
from weft_serverless.engine.ownership import pack_epoch, unpack_epoch
from weft_serverless.engine.persistence.records import RUNNING, WorkflowState
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.engine.persistence.wakeups import WAKE_GRACE
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, Storage
from weft_serverless.testing import CrashingStorage, VirtualClock


def _steps(ctx: Any, x: int) -> Any:
    a = yield ctx.run("a", x)
    return (yield ctx.run("b", a))


WORKFLOWS = {
    "steps": workflow("steps").activities(a=lambda x: x + 1, b=lambda x: x * 10).execute(_steps)
}


def test_a_long_lived_owner_drives_its_own_run_after_its_first_drive_failed(
    storage_factory: Opener,
) -> None:
    """The owner keeps its claim alive by renewing it, and its own pass fires the wake-up."""
    clock = VirtualClock()
    flaky = FlakyStorage(storage_factory())
    e1 = make_engine(lambda: flaky, WORKFLOWS, "e1", clock)
    e2 = make_engine(storage_factory, WORKFLOWS, "e2", clock)
    flaky.fail_once(step_commit("w", 1))
    e1.start("steps", 1, id="w")  # the start landed: its failed drive is logged, not raised
    assert flaky.failures == 1
    store = storage_factory()
    while clock() < T0 + WAKE_GRACE - 1:
        clock.advance(min(RENEW, T0 + WAKE_GRACE - 1 - clock()))
        e2.run_maintenance()
        e1.run_maintenance()
        assert e1.describe("w").status == "running"
        assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
    clock.advance(1)
    e2.run_maintenance()  # not the owner: the wake-up is left to e1
    assert e1.describe("w").status == "running"
    e1.run_maintenance()
    assert e1.get_handle("w").result() == 20
    assert holder_of(store, "w") is None


def test_a_claim_released_at_invocation_end_on_an_unparked_run_leaves_a_wake_up(
    storage_factory: Opener,
) -> None:
    """The invocation ends after the drive failed; its claim is released, so no expiry will
    lead to a takeover: another engine's pass drives the run when its wake-up falls due."""
    clock = VirtualClock()
    flaky = FlakyStorage(storage_factory())
    e1 = make_engine(lambda: flaky, WORKFLOWS, "e1", clock)
    e2 = make_engine(storage_factory, WORKFLOWS, "e2", clock)
    flaky.fail_once(step_commit("w", 2))
    with e1.invocation(time_left=lambda: 60.0):
        e1.start("steps", 1, id="w")
    assert flaky.failures == 1
    store = storage_factory()
    assert holder_of(store, "w") is None
    clock.advance(WAKE_GRACE - 1)
    e2.run_maintenance()
    assert e2.describe("w").status == "running"
    clock.advance(1)
    e2.run_maintenance()
    assert e2.get_handle("w").result() == 20


class _EpochBumpedAfterUpdate(CrashingStorage):
    """Moves the owner epoch on right after an update's batch lands, as a takeover would:
    the update is stored, and the owner's next write in that drive is refused."""

    def __init__(self, inner: Storage, workflow_id: str) -> None:
        super().__init__(inner)
        self.workflow_id = workflow_id
        self.bumped = False

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        ok = super()._conditional_batch(conditions, ops)
        applied = any(op.key.sort.startswith(keys.UPDATE_APPLIED_PREFIX) for op in ops)
        if ok and applied and not self.bumped:
            self.bumped = True
            key = keys.owner_epoch_key(self.workflow_id)
            self.inner.put(key, pack_epoch(unpack_epoch(self.inner.get(key)) + 1))
            head_key = keys.owner_head_key(self.workflow_id)
            head = self.inner.get(head_key)
            if head is not None:  # a run with a head carries its epoch there (ADR 0037)
                moved = Head.from_bytes(head)
                self.inner.put(head_key, moved.rotated(moved.epoch + 1))
        return ok


def _cart(ctx: Any, _: Any) -> Any:
    items: list[str] = []
    ctx.on_update("add", lambda item: items.append(item) or len(items))
    yield ctx.wait_until(lambda: len(items) >= 1)
    return (yield ctx.run("a", 1))


def test_an_update_that_landed_before_its_owner_was_deposed_returns_its_result(
    storage_factory: Opener,
) -> None:
    """The update's record and response are stored; the step after it is refused because
    the owner was deposed meanwhile. The caller gets the update's result (a retry without an
    update_id would apply it twice), not WorkflowClaimUnavailableError."""
    clock = VirtualClock()
    bumping = _EpochBumpedAfterUpdate(storage_factory(), "w")
    flows = {"cart": workflow("cart").activities(a=lambda x: x).execute(_cart)}
    e1 = make_engine(lambda: bumping, flows, "e1", clock)
    e1.start("cart", id="w")
    with pytest.warns(WorkflowClaimLost):
        assert e1.update("w", "add", "apple") == 1
    assert bumping.bumped
    store = storage_factory()
    assert [decode(v)["name"] for _, v in store.scan(keys.workflow_partition("w"), "upa#")] == [
        "add"
    ]
    assert e1.describe("w").status == "running"


# -- a capped pass leaves an owned run's timers to its owner -------------------------------------


def _fails_once(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("flaky", retry=RetryPolicy(max_attempts=2, initial_backoff=1.0)))


def _seed_retired_backlog(storage: Storage, count: int, due: float) -> None:
    """Running runs of a type neither engine registers, each with a timer due at ``due``:
    every pass retains them, and a capped pass moves them on."""
    for n in range(count):
        workflow_id = f"retired-{n}"
        state = WorkflowState(workflow_id, "retired", "1", RUNNING, encode(None), due, due)
        timer = keys.timer_key(keys.DEFAULT_SHARDS, due, workflow_id, "s" + keys.step_slot(0))
        storage.batch(
            [
                Put(keys.state_key(workflow_id), state.to_bytes()),
                Put(timer, encode({"wf": workflow_id, "kind": "sleep"})),
            ]
        )


def test_a_capped_pass_leaves_a_run_held_elsewhere_to_its_owner_s_next_pass(
    storage_factory: Opener,
) -> None:
    """e1 holds a run parked on an activity's retry timer; a backlog of retired runs, due
    before it, fills a little more than one pass's cap. Every round e1's pass comes first,
    reads a cap of the backlog and moves it on; e2's pass reads the rest and the retry timer,
    which only e1 may fire. e2 must leave that timer where it is: e1's next pass reads it
    first and runs the retry.

    Found by the simulation's soak (a flood of retired runs and four engines): e2 moved the
    timer behind the part of the backlog it moved itself, doubling its backoff every round,
    so e1's reads, spent on the part it had moved, never reached it, and the run stayed at
    its first attempt while e1 renewed the claim for ever.
    """
    cap = 4
    clock = VirtualClock()
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")
        return "done"

    flows = {"once": workflow("once").activities(flaky=flaky).execute(_fails_once)}
    e1 = make_engine(storage_factory, flows, "e1", clock)
    e2 = make_engine(storage_factory, flows, "e2", clock)
    store = storage_factory()
    _seed_retired_backlog(store, 2 * cap - 1, T0)
    e1.start("once", id="w")
    assert attempts == [1]
    assert e1.describe("w").status == "running"
    (retry_timer,) = timers_of(store, "w")
    assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
    reports, timers_after = [], []
    while e1.describe("w").status == "running" and len(reports) < 2:
        clock.advance(RENEW)
        e1.run_maintenance(max_timers=cap)
        clock.advance(0.5)
        reports.append(e2.run_maintenance(max_timers=cap))
        timers_after.append(timers_of(store, "w"))
    assert e1.describe("w").status == "completed"
    assert e1.get_handle("w").result() == "done"
    assert attempts == [1, 1]
    assert len(reports) == 2
    # Round one: e2 retained three of the backlog and w's timer, and moved the backlog's only.
    assert (reports[0].parts["timers_retained"], reports[0].parts["timers_deferred"]) == (
        cap,
        cap - 1,
    )
    assert timers_after[0] == [retry_timer]


def _waits(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("go"))


def test_an_engine_that_does_not_register_a_run_s_type_never_takes_it_over(
    storage_factory: Opener,
) -> None:
    storage_factory = layout_2(storage_factory)  # its takeovers come from the claims index
    """The run's owner stops (its claim expires); an engine without the run's type must leave
    the run for one that has it, as its wakes already do, not take it over.

    It took it over, could not run it, and renewed the claim for ever: an engine that does
    register the type could never take it over, and the run's timers, held by a live claim,
    stayed for an owner that could not fire them.
    """
    clock = VirtualClock()
    flows = {"waits": workflow("waits").execute(_waits)}
    others = {"steps": WORKFLOWS["steps"]}
    make_engine(storage_factory, flows, "old", clock).start("waits", id="w")
    store = storage_factory()
    epoch = epoch_of(store, "w")
    without_type = make_engine(storage_factory, others, "without-type", clock)
    for _ in range(3):
        clock.advance(TTL + GRACE + 1)  # the owner's claim expired past its grace
        report = without_type.run_maintenance()
        assert report.parts["claims_reclaimed"] == 0
        assert holder_of(store, "w")["engine_id"] == "old"  # type: ignore[index]
        assert epoch_of(store, "w") == epoch
    successor = make_engine(storage_factory, flows, "successor", clock)
    assert successor.run_maintenance().parts["claims_reclaimed"] == 1
    assert holder_of(store, "w")["engine_id"] == "successor"  # type: ignore[index]
    successor.signal("w", "go", "on")
    successor.run_maintenance()
    assert successor.get_handle("w").result() == "on"
