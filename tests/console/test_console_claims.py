"""The console's actions leave no claim behind: its engine lives as long as the console, and
every action that wakes a run drives it there, so without an invocation scope around each
action the console would keep the run until its claim expired, and the application's next
signal would be left to it (``WorkflowWakeDiscarded``) for half a minute.

GIVEN an application engine and a console on one workflow-lease SQLite file, on one virtual
clock (no claim expires during a test), WHEN the operator acts on a run from the console,
THEN the application's next signal completes the run at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import operator_flows as flows
import pytest
from flask.testing import FlaskClient

from weft_serverless import Engine, SQLiteStorage
from weft_serverless.console.app import Console, create_app
from weft_serverless.testing import VirtualClock

HTMX = {"HX-Request": "true"}

Act = Callable[[Engine, FlaskClient], str]
"""Prepare a run with the application engine, act on it from the console; the run's id."""


@pytest.fixture
def engines(db_path: Path, clock: VirtualClock) -> Iterator[tuple[Engine, Engine]]:
    """(application, console) engines, each in the store's workflow-lease mode."""
    made = [
        Engine.create(
            SQLiteStorage(db_path),
            flows.workflows,
            ownership="workflow-lease",
            background_tasks="manual",
            recover=False,
            clock=clock,
            engine_id=name,
        )
        for name in ("application", "console")
    ]
    yield made[0], made[1]
    for engine in made:
        engine.close()
        engine.runtime.storage.close()


def _post(client: FlaskClient, path: str, **form: str) -> None:
    response = client.post(path, data=form, headers=HTMX)
    assert response.status_code in (200, 204), response.get_data(as_text=True)[:400]
    assert b'class="outcome error"' not in response.data, response.get_data(as_text=True)[:400]


def _signal(app: Engine, client: FlaskClient) -> str:
    run = flows.waiting_for_first(app, "r")
    _post(client, f"/runs/{run}/act/signal", name="first", payload="1")
    return run


def _update(app: Engine, client: FlaskClient) -> str:
    run = flows.waiting_for_a_note(app, "r")
    _post(client, f"/runs/{run}/act/update", name="note", payload='"hi"')
    return run


def _retry(app: Engine, client: FlaskClient) -> str:
    run = flows.failed_on_its_step(app, "r")
    _post(client, f"/runs/{run}/act/retry")
    return run


def _resume(app: Engine, client: FlaskClient) -> str:
    run = flows.suspended(app, "r")
    _post(client, f"/runs/{run}/act/resume")
    return run


def _start(app: Engine, client: FlaskClient) -> str:
    _post(client, "/start", workflow_type="parked", id="r", input="")
    return "r"


def _trigger(app: Engine, client: FlaskClient) -> str:
    app.schedule("hourly", "parked", every="1h")
    _post(client, "/schedules/hourly/trigger")
    (run,) = app.get_schedule("hourly").describe().running
    return run


ACTIONS: dict[str, Act] = {
    "signal": _signal,
    "update": _update,
    "retry": _retry,
    "resume": _resume,
    "start": _start,
    "trigger": _trigger,
}
"""Every console action that wakes a run (and so drives it on the console's engine)."""


@pytest.mark.parametrize("action", ACTIONS)
def test_the_applications_next_signal_completes_the_run_at_once_after_a_console_action(
    engines: tuple[Engine, Engine], action: str
) -> None:
    app, console = engines
    client = create_app(
        Console(console, "SQLite file weft.db", drives=True), config={"TESTING": True}
    ).test_client()
    run = ACTIONS[action](app, client)
    assert app.describe(run).status == "running"
    flows.finishes_at_once(app, run)
