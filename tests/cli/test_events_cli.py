"""``weft events ID``: a run's event log from a store, as a table, as JSON lines, paged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples import order
from examples.workflows import workflows
from weft_serverless import Engine, SQLiteStorage
from weft_serverless.cli import main


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    with Engine.create(storage, workflows, background_tasks="manual") as engine:
        declined = {**order.SAMPLE_ORDER, "order_id": "A-2", "card_last4": "0000"}
        engine.start("order", declined, id="order-declined")
    storage.close()
    return path


def weft(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main(list(argv))
    return status, capsys.readouterr().out


def test_events_prints_the_log(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    status, out = weft(capsys, "events", "order-declined", "--db", str(db))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["AT", "(UTC)", "EVENT", "DETAIL"]
    assert "run.started" in lines[1] and "run.failed" in lines[-1]


def test_events_json_pages_with_after(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    status, out = weft(capsys, "events", "order-declined", "--db", str(db), "--json")
    assert status == 0
    everything = [json.loads(line) for line in out.splitlines()]
    assert everything[0]["type"] == "run.started" and everything[-1]["type"] == "run.failed"
    status, out = weft(
        capsys, "events", "order-declined", "--db", str(db), "--json",
        "--after", everything[0]["event_id"],
    )  # fmt: skip
    assert [json.loads(line) for line in out.splitlines()] == everything[1:]
    status, out = weft(capsys, "events", "order-declined", "--db", str(db), "--limit", "1")
    assert "more: weft events order-declined ... --after" in out
