"""Retention and purge: finished runs are deleted after their window, atomically visible,
crash-safe, and never before they finish."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from feature_support import Opener

from weft_serverless import (
    ConfigurationError,
    Engine,
    InvalidArgumentError,
    RetryPolicy,
    WorkflowAlreadyExistsError,
    WorkflowContext,
    WorkflowNotFoundError,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine, VirtualClock

DAY = 86_400.0


def _double(x: int) -> int:
    return x * 2


def _flaky(x: int) -> int:
    raise RuntimeError("down")


def _quick(ctx: WorkflowContext, x: int) -> Generator[Any, Any, int]:
    return (yield ctx.run("double", x))


def _sleepy(ctx: WorkflowContext, x: int) -> Generator[Any, Any, int]:
    yield ctx.sleep("1h")
    return x


def _failing(ctx: WorkflowContext, x: int) -> Generator[Any, Any, int]:
    return (yield ctx.run("flaky", x, retry=RetryPolicy(max_attempts=1)))


def _failing_then_napping(ctx: WorkflowContext, x: int) -> Generator[Any, Any, int]:
    y = yield ctx.run("flaky", x, retry=RetryPolicy(max_attempts=1))
    yield ctx.sleep("2h")
    return y


WORKFLOWS = {
    "quick": workflow("quick").activities(double=_double).execute(_quick),
    "sleepy": workflow("sleepy").execute(_sleepy),
    "failing": workflow("failing").activities(flaky=_flaky).execute(_failing),
    "failing-then-napping": workflow("failing-then-napping")
    .activities(flaky=_flaky)
    .execute(_failing_then_napping),
}


def _partition(storage: Storage, workflow_id: str) -> list[str]:
    return [sort for sort, _ in storage.scan(keys.workflow_partition(workflow_id))]


def _engine(storage: Storage, **options: Any) -> TestEngine:
    options.setdefault("retention", {"completed": "1d", "cancelled": "2d"})
    return TestEngine(WORKFLOWS, storage=storage, **options)


def test_a_completed_run_is_purged_after_its_window_not_before(storage_factory: Opener) -> None:
    """Kept until the window passes, then gone from describe, list and storage (all records but
    the owner epoch); another status with no window is kept."""
    storage = storage_factory()
    te = _engine(storage)
    te.start("quick", 2, id="done")
    te.start("failing", 1, id="broken")
    assert te.describe("done").status == "completed"
    te.advance(DAY - 1)
    assert te.describe("done").result == 4
    te.advance(2)
    with pytest.raises(WorkflowNotFoundError):
        te.describe("done")
    assert [row.id for row in te.list()] == ["broken"]
    assert _partition(storage, "done") == []
    te.advance(30 * DAY)
    assert te.describe("broken").status == "failed"


def test_a_running_workflow_is_never_purged(storage_factory: Opener) -> None:
    """Retention applies only to finished runs; an explicit purge of a running one refuses."""
    te = _engine(storage_factory())
    te.start("sleepy", 1, id="napping")
    with pytest.raises(InvalidArgumentError):
        te.purge("napping")
    te.advance(3 * DAY)
    assert te.describe("napping").status == "completed"
    te.advance(DAY + 1)
    with pytest.raises(WorkflowNotFoundError):
        te.describe("napping")


def test_a_failed_run_retried_before_its_window_is_not_purged(storage_factory: Opener) -> None:
    """The window of a failed run whose retry is still running does not delete it."""
    te = _engine(storage_factory(), retention={"failed": "1h"})
    te.start("failing-then-napping", 1, id="again")
    assert te.describe("again").status == "failed"
    te.mock("flaky", impl=lambda x: x)
    te.retry("again")
    assert te.describe("again").status == "running"  # parked on its 2 h sleep
    te.advance(3601)  # the failed run's retention timer fires while the retry runs
    assert te.describe("again").status == "running"
    te.advance(3600)
    assert te.describe("again").result == 1


@pytest.mark.parametrize("crash_at", [2, 3])
def test_a_crash_in_the_middle_of_a_purge_is_finished_by_the_next_pass(
    storage_factory: Opener, crash_at: int
) -> None:
    """The state goes first (one batch); the rest in chunks; a crash after either write leaves
    the timer, and the next pass completes the purge."""
    clock = VirtualClock()
    te = _engine(storage_factory(), clock=clock)
    te.start("quick", 3, id="half")
    crashing = CrashingStorage(storage_factory())
    dying = _engine(crashing, clock=clock)
    clock.advance(DAY + 1)
    crashing.crash_after_write = crashing.writes + crash_at - 1
    with pytest.raises(SimulatedCrash):
        dying.run_maintenance()
    survivor = _engine(storage_factory(), clock=clock)
    with pytest.raises(WorkflowNotFoundError):
        survivor.describe("half")
    survivor.run_maintenance()
    storage = storage_factory()
    assert _partition(storage, "half") == []
    for shard in range(keys.TIMER_SHARDS):
        assert list(storage.scan(keys.timer_partition(shard))) == []


def test_an_idempotency_key_outlives_the_purge(storage_factory: Opener) -> None:
    """Repeating a purged run's idempotency key is a conflict, not a silent second run."""
    te = _engine(storage_factory())
    te.start("quick", 1, id="once", idempotency_key="order-7")
    te.purge("once")
    with pytest.raises(WorkflowAlreadyExistsError):
        te.start("quick", 1, id="twice", idempotency_key="order-7")


def test_a_purged_id_can_be_reused_and_stays_fenced_under_workflow_lease(
    storage_factory: Opener,
) -> None:
    """Purge rotates the epoch and keeps it; a new run with the same id claims epoch + 1."""
    storage = storage_factory()
    clock = VirtualClock()
    engine = Engine.create(
        storage,
        WORKFLOWS,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id="e1",
        retention={"completed": "1d"},
    )
    engine.start("quick", 1, id="reused")
    epoch_key = keys.owner_epoch_key("reused")
    first = storage.get(epoch_key)
    clock.advance(DAY + 1)
    engine.run_maintenance()
    assert _partition(storage, "reused") == ["owner#epoch"]
    rotated = storage.get(epoch_key)
    assert rotated is not None and first is not None and rotated > first
    handle = engine.start("quick", 5, id="reused")
    assert handle.result() == 10
    final = storage.get(epoch_key)
    assert final is not None and final > rotated


def test_bad_retention_settings_are_rejected() -> None:
    for bad in ({"running": "1d"}, {"completed": "soon"}, {"completed": 0}):
        with pytest.raises(ConfigurationError):
            TestEngine(WORKFLOWS, retention=bad)
