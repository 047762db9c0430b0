"""``weft cancel-all|signal-all|retry-failed-all`` and ``weft bulk list|show`` on a SQLite
store, run in-process through ``weft_serverless.cli.main`` (output captured)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_parity_support import weft

from examples.workflows import SAMPLES, workflows
from weft_serverless import Engine, SQLiteStorage


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store with two approvals and one reminder waiting."""
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    engine = Engine.create(storage, workflows, background_tasks="manual")
    for workflow_id in ("ap-1", "ap-2"):
        engine.start("approval", {**SAMPLES["approval"], "request_id": workflow_id}, id=workflow_id)
    engine.start("reminder", SAMPLES["reminder"], id="rem-1")
    engine.close()
    storage.close()
    return path


def test_cancel_all_dry_run_then_confirm_then_bulk_list_and_show(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ("--db", str(db))
    status, out, _ = weft(capsys, "cancel-all", "--type", "approval", "--dry-run", *store)
    assert status == 0 and "2 runs match" in out and "--confirm " in out
    status, out, _ = weft(capsys, "cancel-all", "--type", "approval", "--dry-run", *store, "--json")
    preview = json.loads(out)
    assert (preview["count"], preview["filter"]) == (2, {"workflow_type": "approval"})

    status, out, err = weft(
        capsys, "cancel-all", "--status", "running", "--confirm", preview["token"], *store
    )
    assert status != 0 and "BulkConfirmationError" in out + err  # another filter

    status, out, _ = weft(
        capsys, "cancel-all", "--type", "approval", "--confirm", preview["token"],
        "--reason", "cleanup", "--actor", "alice", *store, "--json",
    )  # fmt: skip
    assert status == 0, out
    op = json.loads(out)
    assert (op["status"], op["done"], op["actor"], op["reason"]) == (
        "completed",
        2,
        "alice",
        "cleanup",
    )
    status, out, _ = weft(capsys, "list", "--status", "cancelled", *store, "--json")
    assert sorted(row["id"] for row in json.loads(out)["workflows"]) == ["ap-1", "ap-2"]

    status, out, _ = weft(capsys, "bulk", "list", *store)
    assert status == 0 and op["id"] in out and "alice" in out and "2/0/0" in out
    status, out, _ = weft(capsys, "bulk", "show", op["id"], *store)
    assert status == 0 and "done 2, skipped 0, failed 0" in out and "cleanup" in out


def test_signal_all_with_a_generic_filter(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ("--db", str(db))
    args = ("signal-all", "approve", "--payload", '"ok"', "--filter", 'workflow_type="approval"')
    status, out, _ = weft(capsys, *args, "--dry-run", *store, "--json")
    token = json.loads(out)["token"]
    status, out, _ = weft(capsys, *args, "--confirm", token, *store, "--json")
    assert status == 0 and json.loads(out)["done"] == 2
    status, out, err = weft(capsys, "cancel-all", "--filter", "nonsense", "--dry-run", *store)
    assert status != 0 and "NAME=JSON" in out + err
