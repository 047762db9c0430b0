"""``weft show`` and ``weft events`` after a retry of a failed run: the failure it retried,
its attempts with where they raised, the retry itself, in text and ``--json`` alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import Engine, RetryPolicy, SQLiteStorage, workflow
from weft_serverless.cli import main
from weft_serverless.testing import VirtualClock


class Declined(Exception):
    pass


BROKEN = {"charge"}


def _charge(_: Any) -> str:
    if "charge" in BROKEN:
        raise Declined("card declined")
    return "paid"


def _pay(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("charge", retry=RetryPolicy(max_attempts=1)))


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("retried") / "weft.db"
    flows = {"pay": workflow("pay").activities(charge=_charge).execute(_pay)}
    clock = VirtualClock()
    storage = SQLiteStorage(path)
    with Engine.create(storage, flows, background_tasks="manual", clock=clock) as engine:
        engine.start("pay", id="r")
        clock.advance(60)  # an operator retries a minute later
        BROKEN.clear()
        engine.retry("r")
        assert engine.describe("r").status == "completed"
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_show_keeps_the_failed_attempt_and_where_it_raised(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    shown = json.loads(run(capsys, "show", "r", "--db", str(db), "--json"))
    [failure] = shown["failed_attempts"]
    assert (failure["attempt"], failure["error_type"], failure["after_retries"]) == (
        1,
        "Declined",
        0,
    )
    assert 'raise Declined("card declined")' in failure["traceback"]
    [step] = shown["steps"]
    assert (step["status"], step["attempts"]) == ("ok", 2)
    assert step["retried_at"] is not None and "run again by retry 1" in step["detail"]
    text = run(capsys, "show", "r", "--db", str(db))
    table = text[text.index("failed attempts") :].splitlines()
    assert table[2].split()[:3] == ["1", "charge", "1"] and "Declined: card declined" in table[2]
    tracebacks = text[text.index("tracebacks:") :]
    assert "step 1, attempt 1:" in tracebacks
    assert '    raise Declined("card declined")' in tracebacks


def test_events_keep_the_failure_and_show_the_retry(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    lines = run(capsys, "events", "r", "--db", str(db), "--json").splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == [
        "run.started",
        "step.failed",
        "run.failed",
        "run.retried",
        "step.completed",
        "run.completed",
    ]
    assert "Declined" in events[1]["error"]["traceback"]
    text = run(capsys, "events", "r", "--db", str(db))
    [retried] = [line for line in text.splitlines() if "run.retried" in line]
    assert "step 1; retry 1" in retried
