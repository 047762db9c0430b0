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
from ownership_support import RENEW, T0, Opener, holder_of, make_engine

from weft_serverless import workflow
from weft_serverless.codec import decode
from weft_serverless.engine.ownership import pack_epoch, unpack_epoch
from weft_serverless.engine.wakeups import WAKE_GRACE
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Storage
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
