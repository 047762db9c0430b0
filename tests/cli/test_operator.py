"""The operator CLI (``weft list/show/signal/cancel/result``) against SQLite and moto DynamoDB.

Runs go through ``weft_serverless.cli.main`` in-process (output captured), on stores an
application engine filled with the example workflows, so the CLI reads what a real
deployment writes. One subprocess test checks the installed entry point and exit codes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dynamodb_support import MotoEnvironment, moto, moto_server, new_table

from examples import approval, order, order_saga
from examples.workflows import workflows
from weft_serverless import ConfigurationError, Engine, SQLiteStorage
from weft_serverless.cli import main
from weft_serverless.cli_commands.target import reader_engine
from weft_serverless.storage.dynamodb import DynamoDBStorage

__all__ = ["moto", "moto_server"]  # fixtures from dynamodb_support

REPO = Path(__file__).resolve().parents[2]


def weft(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``weft argv`` in-process; return (exit status, stdout, stderr)."""
    capsys.readouterr()  # drop what the activities printed before
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def fill(engine: Engine) -> None:
    """One run in each interesting state: parked, completed, compensated, failed."""
    engine.start("approval", approval.SAMPLE_INPUT, id="exp-7")
    engine.start("order_saga", order_saga.SAMPLE_INPUT, id="saga-ok")
    declined = {**order.SAMPLE_ORDER, "order_id": "A-2", "card_last4": "0000"}
    engine.start("order", declined, id="order-declined")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A SQLite file holding the runs of ``fill``, written by a separate engine."""
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    with Engine.create(storage, workflows, background_tasks="manual") as engine:
        fill(engine)
    storage.close()
    yield path


def open_engine(path: Path) -> Engine:
    return Engine.create(SQLiteStorage(path), workflows, background_tasks="manual")


# -- reading ------------------------------------------------------------------------------


def test_list_prints_an_aligned_table_and_json(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    status, out, _ = weft(capsys, "list", "--db", str(db))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "TYPE", "STATUS", "CREATED", "(UTC)"]
    rows = {line.split()[0]: line.split()[1:3] for line in lines[1:]}
    assert rows == {
        "exp-7": ["approval", "running"],
        "saga-ok": ["order_saga", "completed"],
        "order-declined": ["order", "failed"],
    }
    # columns line up: every row's status starts where the header's does
    column = lines[0].index("STATUS")
    assert all(line[column:].split()[0] in ("running", "completed", "failed") for line in lines[1:])

    status, out, _ = weft(capsys, "list", "--db", str(db), "--status", "running", "--json")
    listed = json.loads(out)
    assert [row["id"] for row in listed["workflows"]] == ["exp-7"]
    assert listed["next_cursor"] is None


def test_list_pages_with_a_cursor(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(3):
        extra = ["--cursor", cursor] if cursor else []
        _, out, _ = weft(capsys, "list", "--db", str(db), "--limit", "1", "--json", *extra)
        page = json.loads(out)
        seen += [row["id"] for row in page["workflows"]]
        cursor = page["next_cursor"]
    assert (
        cursor is None
        or json.loads(weft(capsys, "list", "--db", str(db), "--cursor", cursor, "--json")[1])[
            "workflows"
        ]
        == []
    )
    assert sorted(seen) == ["exp-7", "order-declined", "saga-ok"]

    _, out, _ = weft(capsys, "list", "--db", str(db), "--limit", "2")
    assert "more: weft list ... --cursor" in out


def test_show_prints_state_and_step_timeline(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    status, out, _ = weft(capsys, "show", "exp-7", "--db", str(db))
    assert status == 0
    assert re.search(r"^status +running$", out, re.MULTILINE)
    assert re.search(r"^type +approval \(version 1\)$", out, re.MULTILINE)
    timeline = out[out.index("STEP") :].splitlines()
    assert timeline[1].split()[:4] == ["1", "run:notify", "ok", "1"]
    # step 2 is the race, parked: its sleep branch shows the approver's deadline
    parked = [line for line in timeline if "2 (branch 3)" in line]
    assert parked and "waiting" in parked[0] and re.search(r"\(in [12]m \d+s\)", parked[0])

    status, out, _ = weft(capsys, "show", "saga-ok", "--db", str(db), "--json")
    shown = json.loads(out)
    assert shown["status"] == "completed"
    assert shown["result"]["status"] == "shipped"
    assert [s["operation"] for s in shown["steps"]] == [
        "run:reserve_stock",
        "run:charge_card",
        "run:book_shipment",
    ]
    assert {s["attempts"] for s in shown["steps"]} == {1}


def test_show_a_failed_run_names_the_error(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    _, out, _ = weft(capsys, "show", "order-declined", "--db", str(db))
    assert re.search(r"^status +failed$", out, re.MULTILINE)
    assert "CardDeclinedError" in out
    failed = [line for line in out.splitlines() if "run:charge_payment" in line]
    assert failed and "failed" in failed[0].split()


def test_result_exit_status_follows_the_outcome(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    status, out, _ = weft(capsys, "result", "saga-ok", "--db", str(db))
    assert status == 0 and json.loads(out)["shipment_id"] == "shp-S-1"

    status, out, err = weft(capsys, "result", "exp-7", "--db", str(db))
    assert status == 3 and out == "" and "running, not finished" in err

    status, out, err = weft(capsys, "result", "order-declined", "--db", str(db), "--json")
    assert status == 1
    error = json.loads(out)["error"]
    assert error["type"] == "ActivityFailedError" and "CardDeclinedError" in error["message"]


def test_reads_work_on_a_lease_store_while_an_engine_holds_the_lease(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Reads need no ownership: on a ``lease`` store whose lease an application engine holds,
    ``list``, ``show`` and ``result`` answer, and leave the lease and the runs as they were
    (the read-only engine checks no marker and takes no lease; a mode ``none`` engine would
    be refused there)."""
    from weft_serverless.storage import keys

    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    app = Engine.create(storage, workflows, ownership="lease", background_tasks="manual")
    fill(app)
    holder = storage.get(keys.meta_key(keys.LEASE_HOLDER))
    before = dict(storage.scan(keys.workflow_partition("exp-7")))
    for argv in (("list",), ("show", "exp-7"), ("result", "saga-ok")):
        status, _, err = weft(capsys, *argv, "--db", str(path))
        assert (status, err) == (0, ""), argv
    reader = reader_engine(SQLiteStorage(path), "reader")
    with pytest.raises(ConfigurationError, match="only reads"):
        reader.signal("exp-7", "approve", {"by": "eve"})
    with pytest.raises(ConfigurationError, match="only reads"):
        reader.cancel("exp-7")
    assert storage.get(keys.meta_key(keys.LEASE_HOLDER)) == holder
    assert dict(storage.scan(keys.workflow_partition("exp-7"))) == before
    app.close()
    storage.close()


# -- writing ------------------------------------------------------------------------------


def test_signal_is_stored_then_delivered_by_maintenance(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    # WHEN an operator signals without naming the workflows module
    status, out, err = weft(
        capsys, "signal", "exp-7", "approve", "--payload", '{"by": "grace"}', "--db", str(db)
    )
    # THEN the signal is stored, quietly, and the run still waits for a driver
    assert status == 0, err
    assert "signal 'approve' stored for exp-7 (status now: running)" in out
    assert err == ""
    # AND the application's next maintenance pass delivers it
    with open_engine(db) as engine:
        engine.run_maintenance()
        assert engine.get_handle("exp-7").result()["decided_by"] == "grace"


def test_signal_with_workflows_drives_inline(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    status, out, err = weft(
        capsys,
        *("signal", "exp-7", "reject", "--payload", '{"by": "grace"}', "--json"),
        *("--db", str(db), "--workflows", "examples.workflows"),
    )
    assert status == 0, err
    assert json.loads(out) == {"id": "exp-7", "signal": "reject", "status": "completed"}
    _, out, _ = weft(capsys, "result", "exp-7", "--db", str(db), "--json")
    assert json.loads(out)["result"]["decision"] == "rejected"


def test_cancel(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    status, out, _ = weft(capsys, "cancel", "exp-7", "--db", str(db))
    assert status == 0 and out.strip() == "exp-7 is cancelled"
    status, _, err = weft(capsys, "result", "exp-7", "--db", str(db))
    assert status == 1 and "cancelled" in err
    # cancelling a finished run changes nothing and says so
    status, out, _ = weft(capsys, "cancel", "saga-ok", "--db", str(db))
    assert status == 0 and out.strip() == "saga-ok is already completed; nothing to cancel"


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected_status", "message"),
    [
        (["show", "nope"], 1, "WorkflowNotFoundError"),
        (["signal", "exp-7", "approve", "--payload", "{oops"], 2, "--payload is not JSON"),
        (["list", "--status", "sleeping"], 2, "InvalidArgumentError"),  # a bad option: usage
    ],
)
def test_errors_go_to_stderr_with_a_status(
    capsys: pytest.CaptureFixture[str],
    db: Path,
    argv: list[str],
    expected_status: int,
    message: str,
) -> None:
    status, out, err = weft(capsys, *argv, "--db", str(db))
    assert (status, out) == (expected_status, "")
    assert message in err


def test_target_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEFT_TABLE_NAME", raising=False)
    status, _, err = weft(capsys, "list")
    assert status == 2 and "--db PATH, or --table NAME" in err
    status, _, err = weft(capsys, "list", "--db", str(tmp_path / "missing.db"))
    assert status == 1 and "no SQLite file" in err
    assert not (tmp_path / "missing.db").exists()


def test_entry_point_runs_as_a_program(db: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "weft_serverless.cli", "result", "exp-7", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 3, done.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "weft_serverless.cli", "show"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert usage.returncode == 2 and "usage:" in usage.stderr


# -- DynamoDB (moto), workflow-lease as deployed ---------------------------------------------


@pytest.fixture
def table(moto: MotoEnvironment) -> Iterator[str]:
    """A moto table filled by a workflow-lease engine, as the Lambda handlers would leave it."""
    client = moto.client()
    name = new_table(client)
    storage = DynamoDBStorage(name, client=client)
    engine = Engine.create(
        storage, workflows, ownership="workflow-lease", background_tasks="manual", recover=False
    )
    with engine.invocation(time_left=lambda: 30.0):
        fill(engine)
    engine.start("approval", {**approval.SAMPLE_INPUT, "request_id": "held"}, id="held")
    yield name  # "held" stays claimed by this engine, like a container mid-invocation
    engine.close()
    client.delete_table(TableName=name)


def test_dynamodb_show_names_the_owner_and_cancel_deposes_it(
    capsys: pytest.CaptureFixture[str], table: str
) -> None:
    status, out, _ = weft(capsys, "show", "held", "--table", table)
    assert status == 0
    owner = next(line for line in out.splitlines() if line.startswith("owner"))
    assert "(epoch 1), claim expires" in owner
    _, out, _ = weft(capsys, "show", "exp-7", "--table", table, "--json")
    assert json.loads(out)["owner"] == {"holder": None, "epoch": 1}  # released at invocation end

    # WHEN an operator cancels the held run THEN its epoch rotates: the owner is fenced out
    status, out, err = weft(capsys, "cancel", "held", "--table", table)
    assert status == 0, err
    _, out, _ = weft(capsys, "show", "held", "--table", table, "--json")
    shown: dict[str, Any] = json.loads(out)
    assert shown["status"] == "cancelled"
    assert shown["owner"]["holder"] is None and shown["owner"]["epoch"] == 2


def test_dynamodb_signal_and_list_over_moto_server(
    capsys: pytest.CaptureFixture[str], table: str, moto_server: str
) -> None:
    target = ("--table", table, "--endpoint-url", moto_server)
    status, out, err = weft(capsys, "list", *target, "--json")
    assert status == 0, err
    assert {row["id"] for row in json.loads(out)["workflows"]} == {
        "exp-7",
        "saga-ok",
        "order-declined",
        "held",
    }
    status, out, err = weft(
        capsys, "signal", "exp-7", "approve", "--payload", '{"by": "grace"}', *target
    )
    assert (status, err) == (0, "")
    # the CLI held no claim afterwards, so the application's maintenance delivers the signal
    storage = DynamoDBStorage(table, endpoint_url=moto_server)
    with Engine.create(
        storage, workflows, ownership="workflow-lease", background_tasks="manual", recover=False
    ) as engine:
        engine.run_maintenance()
    _, out, _ = weft(capsys, "result", "exp-7", *target, "--json")
    assert json.loads(out)["result"]["decided_by"] == "grace"


# -- exit status and pipes ----------------------------------------------------------------------


def test_an_option_the_engine_refuses_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    for option in (["--limit", "0"], ["--status", "bogus"]):
        status, out, err = weft(capsys, "list", "--db", str(db), *option)
        assert (status, out) == (2, ""), option
        assert err.startswith("weft: InvalidArgumentError: "), err


def test_a_reader_that_stops_early_ends_the_listing_quietly(tmp_path: Path) -> None:
    """``weft list --json | head -c 400``: no traceback, the SIGPIPE status."""
    path = tmp_path / "many.db"
    with Engine.create(SQLiteStorage(path), workflows, background_tasks="manual") as engine:
        for n in range(400):  # ~100 KB of JSON: more than a pipe buffers
            engine.start(
                "approval", approval.SAMPLE_INPUT, id=f"{n:04d}-" + "x" * 200, start_after="1h"
            )
    command = [sys.executable, "-m", "weft_serverless.cli", "list", "--json", "--limit", "1000"]
    reader = subprocess.Popen(
        [*command, "--db", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    assert reader.stdout is not None and reader.stderr is not None
    head = reader.stdout.read(400)
    reader.stdout.close()
    err = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == 141, err
    assert head.startswith(b"{") and err == ""
