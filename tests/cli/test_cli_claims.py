"""``weft`` commands that wake a run leave no claim behind: with ``--workflows`` the command's
engine drives the woken run, which claims it, and each command runs in an invocation scope
(as the Lambda API does) that releases it when the operation returns.

GIVEN an application engine on a workflow-lease SQLite file (on a virtual clock pinned to now:
no claim the command takes can expire during the test), WHEN an operator runs a command that
wakes a run, THEN the application's next signal completes the run at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import operator_flows as flows
import pytest

from weft_serverless import Engine, SQLiteStorage
from weft_serverless.cli import main
from weft_serverless.testing import VirtualClock

Act = Callable[[Engine, "Weft"], str]
"""Prepare a run with the application engine, act on it with ``weft``; the run's id."""


class Weft:
    """``weft`` in-process on one store, driving with ``--workflows operator_flows``."""

    def __init__(self, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.db, self.capsys = db, capsys

    def __call__(self, *argv: str) -> str:
        self.capsys.readouterr()
        status = main([*argv, "--db", str(self.db), "--workflows", "operator_flows"])
        out, err = self.capsys.readouterr()
        assert status == 0, err
        return out

    def bulk(self, *argv: str) -> None:
        preview = json.loads(self(*argv, "--dry-run", "--json"))
        assert preview["count"] == 1
        done = json.loads(self(*argv, "--confirm", preview["token"], "--json"))
        assert done["done"] == 1


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine.create(
        SQLiteStorage(tmp_path / "weft.db"),
        flows.workflows,
        ownership="workflow-lease",
        background_tasks="manual",
        recover=False,
        clock=VirtualClock(time.time()),
        engine_id="application",
    )
    yield engine
    engine.close()
    engine.runtime.storage.close()


def _signal(app: Engine, weft: Weft) -> str:
    run = flows.waiting_for_first(app, "r")
    weft("signal", run, "first", "--payload", "1")
    return run


def _update(app: Engine, weft: Weft) -> str:
    run = flows.waiting_for_a_note(app, "r")
    weft("update", run, "note", "--payload", '"hi"')
    return run


def _retry(app: Engine, weft: Weft) -> str:
    run = flows.failed_on_its_step(app, "r")
    weft("retry", run)
    return run


def _resume(app: Engine, weft: Weft) -> str:
    run = flows.suspended(app, "r")
    weft("resume", run)
    return run


def _start(app: Engine, weft: Weft) -> str:
    return str(json.loads(weft("start", "parked", "--id", "r", "--json"))["id"])


def _trigger(app: Engine, weft: Weft) -> str:
    app.schedule("hourly", "parked", every="1h")
    return str(json.loads(weft("schedule", "trigger", "hourly", "--json"))["workflow_id"])


def _backfill(app: Engine, weft: Weft) -> str:
    app.schedule("hourly", "parked", every="1h")
    now = app.runtime.now()
    answer = weft("schedule", "backfill", "hourly", "--start", str(now - 5400), "--end", str(now))
    (run,) = app.get_schedule("hourly").describe().running
    assert run in answer
    return run


def _complete(app: Engine, weft: Weft) -> str:
    run = flows.waiting_for_remote(app, "r")
    weft("activity", "complete", flows.TOKENS[-1], "--result", "7")
    return run


def _fail(app: Engine, weft: Weft) -> str:
    run = flows.waiting_for_remote(app, "r")
    weft("activity", "fail", flows.TOKENS[-1], "--message", "declined")
    return run


def _signal_all(app: Engine, weft: Weft) -> str:
    run = flows.waiting_for_first(app, "r")
    weft.bulk("signal-all", "first", "--type", "signalled")
    return run


def _retry_all(app: Engine, weft: Weft) -> str:
    run = flows.failed_on_its_step(app, "r")
    weft.bulk("retry-failed-all", "--type", "flaky")
    return run


COMMANDS: dict[str, Act] = {
    "signal": _signal,
    "update": _update,
    "retry": _retry,
    "resume": _resume,
    "start": _start,
    "schedule trigger": _trigger,
    "schedule backfill": _backfill,
    "activity complete": _complete,
    "activity fail": _fail,
    "signal-all": _signal_all,
    "retry-failed-all": _retry_all,
}
"""Every ``weft`` command that wakes a run (and so drives it with ``--workflows``)."""


@pytest.mark.parametrize("command", COMMANDS)
def test_the_applications_next_signal_completes_the_run_at_once_after_a_weft_command(
    app: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    run = COMMANDS[command](app, Weft(tmp_path / "weft.db", capsys))
    assert app.describe(run).status == "running"
    flows.finishes_at_once(app, run)
