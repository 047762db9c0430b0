"""A local caller of the API's operations (the console, ``weft``) runs each one in an
invocation scope, as the Lambda API does: what the call's engine claimed while it drove a
woken run is released when the call returns, even though that engine lives on.

GIVEN an application engine and a long-lived operator engine on one workflow-lease store
(virtual time, so no claim ever expires during a test), WHEN the operator's call wakes a run
that stays alive, THEN the application's next signal completes the run at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import operator_flows as flows
import pytest

from weft_serverless import Engine, SQLiteStorage
from weft_serverless.aws.calls import call
from weft_serverless.testing import VirtualClock

Act = Callable[[Engine, Engine], str]
"""Prepare a run with the application engine, act on it with the operator's; the run's id."""


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    """(application, operator) engines on one SQLite file and one virtual clock."""
    clock = VirtualClock()
    made = [
        Engine.create(
            SQLiteStorage(tmp_path / "weft.db"),
            flows.workflows,
            ownership="workflow-lease",
            background_tasks="manual",
            recover=False,
            clock=clock,
            engine_id=name,
        )
        for name in ("application", "operator")
    ]
    yield made[0], made[1]
    for engine in made:
        engine.close()
        engine.runtime.storage.close()


def _op(engine: Engine, operation: str, body: dict[str, Any] | None = None, **params: str) -> Any:
    status, reply = call(engine, operation, params=params, body=body)
    assert status < 300, reply
    return reply


def _signal(app: Engine, op: Engine) -> str:
    run = flows.waiting_for_first(app, "r")
    _op(op, "signal_workflow", {"payload": 1}, workflow_id=run, name="first")
    return run


def _update(app: Engine, op: Engine) -> str:
    run = flows.waiting_for_a_note(app, "r")
    assert _op(op, "update_workflow", {"payload": "hi"}, workflow_id=run, name="note")["result"]
    return run


def _retry(app: Engine, op: Engine) -> str:
    run = flows.failed_on_its_step(app, "r")
    _op(op, "retry_workflow", workflow_id=run)
    return run


def _resume(app: Engine, op: Engine) -> str:
    run = flows.suspended(app, "r")
    _op(op, "resume_workflow", workflow_id=run)
    return run


def _start(app: Engine, op: Engine) -> str:
    return str(_op(op, "start_workflow", {"workflow_type": "parked", "id": "r"})["id"])


def _trigger(app: Engine, op: Engine) -> str:
    app.schedule("hourly", "parked", every="1h")
    return str(_op(op, "trigger_schedule", schedule_id="hourly")["workflow_id"])


def _backfill(app: Engine, op: Engine) -> str:
    app.schedule("hourly", "parked", every="1h")
    now = app.runtime.now()
    body = {"start": now - 5400, "end": now - 1800}
    (run,) = _op(op, "backfill_schedule", body, schedule_id="hourly")["workflow_ids"]
    return str(run)


def _complete(app: Engine, op: Engine) -> str:
    run = flows.waiting_for_remote(app, "r")
    _op(op, "complete_activity", {"token": flows.TOKENS[-1], "result": 7})
    return run


def _fail(app: Engine, op: Engine) -> str:
    run = flows.waiting_for_remote(app, "r")
    _op(op, "fail_activity", {"token": flows.TOKENS[-1], "message": "declined"})
    return run


def _bulk(op: Engine, operation: str, body: dict[str, Any]) -> None:
    preview = _op(op, operation, {**body, "dry_run": True})
    assert preview["count"] == 1
    assert _op(op, operation, {**body, "confirm": preview["token"]})["done"] == 1


def _signal_all(app: Engine, op: Engine) -> str:
    run = flows.waiting_for_first(app, "r")
    _bulk(op, "bulk_signal", {"name": "first", "filter": {"workflow_type": "signalled"}})
    return run


def _retry_all(app: Engine, op: Engine) -> str:
    run = flows.failed_on_its_step(app, "r")
    _bulk(op, "bulk_retry", {"filter": {"workflow_type": "flaky"}})
    return run


WAKING: dict[str, Act] = {
    "signal_workflow": _signal,
    "update_workflow": _update,
    "retry_workflow": _retry,
    "resume_workflow": _resume,
    "start_workflow": _start,
    "trigger_schedule": _trigger,
    "backfill_schedule": _backfill,
    "complete_activity": _complete,
    "fail_activity": _fail,
    "bulk_signal": _signal_all,
    "bulk_retry": _retry_all,
}
"""Every operation that can wake a run, and so drive it inline on the caller's engine."""


@pytest.mark.parametrize("operation", WAKING)
def test_a_local_call_that_wakes_a_run_releases_its_claim_when_it_returns(
    engines: tuple[Engine, Engine], operation: str
) -> None:
    app, op = engines
    run = WAKING[operation](app, op)
    assert app.describe(run).status == "running"
    flows.finishes_at_once(app, run)
