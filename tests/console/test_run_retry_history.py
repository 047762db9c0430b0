"""The run page after a retry of a failed run: the failed attempts of the step it ran again
stay on its row, each says whether it came after a retry and where it raised, and the step's
duration counts from the retry (ADR 0044)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from flask.testing import FlaskClient
from run_html import find, text, texts

from weft_serverless import Engine, RetryPolicy, WorkflowDefinition, workflow
from weft_serverless.testing import VirtualClock

BROKEN = {"charge"}


def _charge(_: Any) -> str:
    if "charge" in BROKEN:
        raise ConnectionError("upstream said 503")
    return "paid"


def _pay(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("charge", retry=RetryPolicy(max_attempts=1)))


@pytest.fixture
def registry() -> Mapping[str, WorkflowDefinition]:
    return {"pay": workflow("pay").activities(charge=_charge).execute(_pay)}


def test_a_retried_step_keeps_its_failure_its_traceback_and_an_honest_duration(
    client: FlaskClient, engine: Engine, clock: VirtualClock
) -> None:
    BROKEN.add("charge")
    engine.start("pay", id="p")
    clock.advance(100)  # the run sits failed; then the operator retries and it passes
    BROKEN.clear()
    engine.retry("p")
    clock.advance(5)  # the page is read 5 s later
    html = client.get("/runs/p").get_data(as_text=True)
    assert texts(html, "failed-attempt") == [
        "attempt 1 failed 2026-01-01 00:00:00: ConnectionError: upstream said 503; retry 5.0 s ago"
    ]
    [traceback] = find(html, "failed-attempt-traceback")
    assert traceback.tag == "details"
    assert 'raise ConnectionError("upstream said 503")' in traceback.text
    assert text(html, "step-status") == "ok"
    assert text(html, "step-duration") == "0 ms"  # not the 100 s the run sat failed
