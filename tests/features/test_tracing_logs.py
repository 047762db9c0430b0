"""Every line the engine logs inside a drive carries the run's ``workflow_id``,
``workflow_type`` and ``step`` as structured fields (record attributes, which a JSON
formatter such as powertools' prints as keys), without each call site passing them."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from feature_support import Opener, make_engine

from weft_serverless import RetryPolicy, workflow


def _flows() -> Any:
    def refuse(_: Any) -> None:
        raise PermissionError("card declined")

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.sleep(1)
        ctx.log.info("charging")
        return (yield ctx.run("refuse", None, retry=RetryPolicy(max_attempts=1)))

    return {"pay": workflow("pay").activities(refuse=refuse).execute(body)}


def _records(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_engine_and_workflow_lines_carry_the_run_and_its_step(
    storage_factory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="weft_serverless")
    te = make_engine(storage_factory, _flows())
    te.start("pay", id="p-1")
    te.advance(1.0)

    [failed] = _records(caplog, "workflow p-1 failed")  # a line that passes no fields itself
    [charging] = _records(caplog, "charging")  # the workflow's own ctx.log
    [attempt] = _records(caplog, "failed on attempt 1")
    for record in (failed, charging, attempt):
        fields = record.__dict__
        assert (fields["workflow_id"], fields["workflow_type"]) == ("p-1", "pay"), record
    assert (failed.__dict__["step"], attempt.__dict__["step"]) == ("2", "2")
    assert charging.__dict__["step"] == "1"  # the last step advanced: the sleep


def test_lines_outside_a_drive_carry_no_run(
    storage_factory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="weft_serverless")
    te = make_engine(storage_factory, _flows())
    te.start("pay", id="p-2")
    caplog.clear()
    logging.getLogger("weft_serverless.engine").info("between drives")
    [line] = _records(caplog, "between drives")
    assert "workflow_id" not in line.__dict__ and "step" not in line.__dict__


def test_lines_on_activity_threads_carry_the_run_and_their_own_step(
    storage_factory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="weft_serverless")
    barrier = threading.Barrier(2)
    log = logging.getLogger("weft_serverless.workflow")

    def branch(key: str) -> str:
        barrier.wait(20.0)  # both branches run at once, on two activity threads
        log.info("branch %s", key)
        return key

    async def fetch(key: str) -> str:
        log.info("fetch %s", key)
        return key

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.all(ctx.run("branch", "a"), ctx.run("branch", "b"))
        return (yield ctx.run("fetch", "c"))

    flows = {"fan": workflow("fan").activities(branch=branch, fetch=fetch).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("fan", id="f-1").result() == "c"
    for text, step in (
        ("branch a", "1 (branch 1)"),
        ("branch b", "1 (branch 2)"),
        ("fetch c", "2"),
    ):
        [line] = _records(caplog, text)
        fields = line.__dict__
        assert (fields["workflow_id"], fields["workflow_type"], fields["step"]) == (
            "f-1",
            "fan",
            step,
        ), text
