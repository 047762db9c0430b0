"""``weft schedule create|list|show|pause|resume|trigger|delete`` on a SQLite store, run
in-process through ``weft_serverless.cli.main`` (output captured)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_parity_support import weft

from examples.workflows import workflows
from weft_serverless import Engine, SQLiteStorage


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    Engine.create(storage, workflows, background_tasks="manual").close()
    storage.close()
    return path


def test_the_schedule_commands(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ("--db", str(db))
    status, out, _ = weft(
        capsys,
        "schedule", "create", "nightly", "scheduled_report",
        "--cron", "0 2 * * *", "--timezone", "Europe/Berlin",
        "--input", '{"region": "eu"}', "--workflows", "examples.workflows", *store, "--json",
    )  # fmt: skip
    assert status == 0, out
    created = json.loads(out)
    assert (created["cron"], created["timezone"], created["input"]) == (
        "0 2 * * *",
        "Europe/Berlin",
        {"region": "eu"},
    )

    status, out, _ = weft(capsys, "schedule", "list", *store)
    assert status == 0 and "nightly" in out and "cron '0 2 * * *' Europe/Berlin" in out

    assert weft(capsys, "schedule", "pause", "nightly", *store)[0] == 0
    status, out, _ = weft(capsys, "schedule", "show", "nightly", *store, "--json")
    assert json.loads(out)["paused"] is True
    assert weft(capsys, "schedule", "resume", "nightly", *store)[0] == 0

    status, out, _ = weft(
        capsys, "schedule", "trigger", "nightly", "--workflows", "examples.workflows", *store,
        "--json",
    )  # fmt: skip
    fired = json.loads(out)
    assert fired["workflow_id"].startswith("nightly-")
    assert fired["schedule"]["fired"] == 1
    status, out, _ = weft(capsys, "result", fired["workflow_id"], *store, "--json")
    assert json.loads(out)["status"] == "completed"

    status, out, _ = weft(capsys, "schedule", "delete", "nightly", *store)
    assert (status, out.strip()) == (0, "nightly deleted")
    status, _, err = weft(capsys, "schedule", "show", "nightly", *store)
    assert status == 1 and "ScheduleNotFoundError" in err


def test_a_bad_cron_is_a_usage_error_and_stores_nothing(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ("--db", str(db))
    status, _, err = weft(
        capsys, "schedule", "create", "bad", "scheduled_report", "--cron", "99 * * * *",
        "--workflows", "examples.workflows", *store,
    )  # fmt: skip
    assert status == 2 and "InvalidScheduleError" in err
    assert weft(capsys, "schedule", "list", *store)[1].strip() == "no schedules"
