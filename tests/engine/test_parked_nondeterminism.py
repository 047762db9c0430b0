"""A step parked on a pending record must be resumed by the same operation after a redeploy."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from weft_serverless import WorkflowContext, workflow
from weft_serverless.storage.base import Storage
from weft_serverless.testing import TestEngine

Opener = Callable[[], Storage]


def _one(_: Any) -> int:
    return 1


def _v1(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, str]:
    yield ctx.run("one")
    yield ctx.sleep("1h")
    return "slept"


def _v2(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, str]:
    yield ctx.run("one")
    yield ctx.wait_for_signal("go", timeout="1h")
    return "waited"


def test_changed_code_at_a_parked_step_fails_the_run_naming_both_operations(
    storage_factory: Opener,
) -> None:
    """v1 parks on a sleep (step 2); v2 yields a signal wait there: the run fails with a
    NondeterminismError naming step 2, the stored ``sleep`` and the new ``signal:go``."""
    v1 = workflow("flow").activities(one=_one).execute(_v1)
    te = TestEngine({"flow": v1}, storage=storage_factory())
    te.start("flow", id="w")
    assert te.describe("w").status == "running"
    te.crash()

    v2 = workflow("flow").activities(one=_one).execute(_v2)
    fresh = TestEngine({"flow": v2}, storage=storage_factory(), clock=te.clock)
    description = fresh.describe("w")
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "NondeterminismError"
    message = description.error["message"]
    assert "step 2" in message and "'sleep'" in message and "'signal:go'" in message
