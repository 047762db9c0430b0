"""CLI parity, continued (see ``test_cli_parity``): query, update, suspend, resume, retry,
purge, activity complete|fail and the schedule commands, on SQLite; and start, query, update
and describe on a workflow-lease DynamoDB table (moto).
"""

from __future__ import annotations

import json
from pathlib import Path

import cli_remote_flows
import pytest
from cli_parity_support import EXAMPLES, api, db, stored, weft
from dynamodb_support import MotoEnvironment, moto, new_table

from examples import approval
from examples.workflows import workflows
from weft_serverless import Engine, SQLiteStorage
from weft_serverless.storage import keys
from weft_serverless.storage.dynamodb import DynamoDBStorage

__all__ = ["db", "moto"]  # fixtures from cli_parity_support and dynamodb_support


# -- query and update -----------------------------------------------------------------------


def test_query_answers_from_the_replay_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    before = stored(db, "exp-7")
    status, out, err = weft(capsys, "query", "exp-7", "status", "--db", str(db), *EXAMPLES)
    assert status == 0, err
    assert json.loads(out)["stage"] == "awaiting-approver"
    status, out, _ = weft(capsys, "query", "exp-7", "status", "--db", str(db), *EXAMPLES, "--json")
    assert json.loads(out)["query"] == "status"
    assert stored(db, "exp-7") == before
    status, _, err = weft(capsys, "query", "exp-7", "status", "--db", str(db))
    assert status == 2 and "weft query needs --workflows MODULE" in err
    status, _, err = weft(capsys, "query", "exp-7", "nope", "--db", str(db), *EXAMPLES)
    assert status == 2 and err.startswith("weft: UnknownQueryError: ")


def test_update_applies_and_a_refused_update_exits_2(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    comment = json.dumps({"by": "ada", "text": "the budget allows it"})
    status, out, err = weft(
        capsys,
        *("update", "exp-7", "comment", "--payload", comment, "--update-id", "u-1"),
        *("--db", str(db), *EXAMPLES, "--json"),
    )
    assert status == 0, err
    assert json.loads(out) == {"id": "exp-7", "update": "comment", "result": 1}
    before = stored(db, "exp-7")
    bad = json.dumps({"by": "", "text": ""})
    status, out, err = weft(
        capsys, "update", "exp-7", "comment", "--payload", bad, "--db", str(db), *EXAMPLES
    )
    assert (status, out) == (2, "")
    assert err.startswith("weft: UpdateValidationError: ")
    assert stored(db, "exp-7") == before
    _, out, _ = weft(capsys, "query", "exp-7", "status", "--db", str(db), *EXAMPLES)
    assert json.loads(out)["comments"] == [{"by": "ada", "text": "the budget allows it"}]


# -- suspend, resume, retry, purge ------------------------------------------------------------


def test_suspend_resume_retry_and_purge(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    store = ("--db", str(db))
    assert weft(capsys, "suspend", "exp-7", *store)[1].strip() == "exp-7 is suspended"
    status, out, _ = weft(capsys, "resume", "exp-7", *store, *EXAMPLES, "--json")
    assert status == 0 and json.loads(out)["status"] == "running"
    # a retry is refused unless the run failed: the engine's 400, exit 2
    status, _, err = weft(capsys, "retry", "saga-ok", *store)
    assert status == 2 and err.startswith("weft: InvalidArgumentError: ")
    status, out, _ = weft(capsys, "retry", "order-declined", *store)
    assert (status, out.strip()) == (0, "order-declined is running")
    # a purge is refused until the run finished
    status, _, err = weft(capsys, "purge", "exp-7", *store)
    assert status == 2 and "cancel it first" in err
    assert stored(db, "exp-7") != {}
    status, out, _ = weft(capsys, "purge", "saga-ok", *store, "--json")
    assert json.loads(out) == {"id": "saga-ok", "purged": True}
    assert stored(db, "saga-ok") == {}
    # a purged run is gone: the API's 404, an error, not a usage error
    status, _, err = weft(capsys, "resume", "saga-ok", *store)
    assert status == 1 and err.startswith("weft: WorkflowNotFoundError: ")


# -- asynchronous activities ----------------------------------------------------------------


def test_activity_complete_and_fail_by_token(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "remote.db"
    store = ("--db", str(path))
    flows = ("--workflows", "cli_remote_flows")
    cli_remote_flows.TOKENS.clear()
    with Engine.create(
        SQLiteStorage(path), cli_remote_flows.workflows, background_tasks="manual"
    ) as engine:
        engine.start("awaits_remote", id="r-ok")
        engine.start("awaits_remote", id="r-bad")
    ok, bad = cli_remote_flows.TOKENS

    status, out, err = weft(capsys, "activity", "complete", ok, "--result", '{"n": 1}', *store)
    assert (status, out.strip()) == (0, "activity completed"), err
    status, out, _ = weft(
        capsys,
        *("activity", "fail", bad, "--message", "declined", "--error-type", "Declined"),
        *store,
        *flows,
        "--json",
    )
    assert (status, json.loads(out)) == (0, {"accepted": True})
    failed = api(path, "describe_workflow", workflow_id="r-bad")
    assert failed["status"] == "failed" and "declined" in failed["error"]["message"]
    # the token is single use: a second completion is the API's 404
    status, _, err = weft(capsys, "activity", "complete", ok, *store)
    assert status == 1 and err.startswith("weft: ActivityTokenNotFoundError: ")
    status, _, err = weft(
        capsys, "activity", "fail", "t", "--message", "m", "--error-type", "no such", *store
    )
    assert status == 2 and "error_type: must match" in err


# -- schedules --------------------------------------------------------------------------------


def test_schedule_backfill_starts_the_past_fires(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    store = ("--db", str(db))
    status, _, err = weft(
        capsys,
        *("schedule", "create", "hourly", "scheduled_report", "--every", "1h"),
        *("--input", '{"region": "eu"}', *EXAMPLES, *store),
    )
    assert status == 0, err
    status, out, err = weft(
        capsys,
        *("schedule", "backfill", "hourly", "--start", "2026-01-01T00:00:00+00:00"),
        *("--end", "2026-01-01T02:30:00+00:00", *EXAMPLES, *store, "--json"),
    )
    assert status == 0, err
    started = json.loads(out)["workflow_ids"]
    assert len(started) == 3 and all(run.startswith("hourly-") for run in started)
    status, _, err = weft(
        capsys, "schedule", "backfill", "hourly", "--start", "x", "--end", "1", *EXAMPLES, *store
    )
    assert status == 2 and "start" in err


def test_schedule_create_takes_the_routes_fields_and_refusals(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """``weft schedule create`` carries out the API's operation: ``--start-at``/``--end-at``
    as the route has them, its overlap enum, and ``--json`` the API's ``Schedule``."""
    store = ("--db", str(db), *EXAMPLES)
    status, out, err = weft(
        capsys,
        *("schedule", "create", "later", "scheduled_report", "--every", "15m"),
        *("--start-at", "2100-01-01T00:00:00+00:00", "--end-at", "4102531200", *store, "--json"),
    )
    assert status == 0, err
    created = json.loads(out)
    assert (created["start_at"], created["end_at"]) == (4102444800.0, 4102531200.0)
    assert created["next_fire_at"] == 4102444800.0
    assert created == api(db, "describe_schedule", schedule_id="later")
    status, out, err = weft(
        capsys,
        *("schedule", "create", "odd", "scheduled_report", "--every", "1h"),
        *("--overlap", "sometimes", *store),
    )
    assert (status, out) == (2, "")
    assert err.startswith("weft: InvalidArgumentError: overlap: must be one of skip")
    status, _, err = weft(capsys, "schedule", "show", "odd", "--db", str(db))
    assert status == 1 and "ScheduleNotFoundError" in err


# -- DynamoDB (moto), workflow-lease as deployed ----------------------------------------------


def test_start_query_update_and_suspend_on_a_workflow_lease_table(
    capsys: pytest.CaptureFixture[str], moto: MotoEnvironment
) -> None:
    """On a fenced DynamoDB store the writes carry the store's mode (the started run's claim is
    released when the command ends), a query on the read-only engine claims nothing, and
    ``describe --json`` names a run's owner as the API does."""
    client = moto.client()
    table = new_table(client)
    storage = DynamoDBStorage(table, client=client)
    app = Engine.create(
        storage, workflows, ownership="workflow-lease", background_tasks="manual", recover=False
    )
    app.start("approval", {**approval.SAMPLE_INPUT, "request_id": "held"}, id="held")
    target = ("--table", table)
    try:
        _, out, _ = weft(capsys, "describe", "held", *target, "--json")
        held = json.loads(out)["owner"]
        assert held is not None and held == json.loads(json.dumps(app.describe("held").owner))
        assert held["engine_id"] == app.runtime.engine_id
        status, out, err = weft(
            capsys,
            *("start", "approval", "--input", json.dumps(approval.SAMPLE_INPUT), "--id", "ap-1"),
            *(*target, *EXAMPLES, "--json"),
        )
        assert status == 0, err
        assert json.loads(out)["status"] == "running"
        _, out, _ = weft(capsys, "describe", "ap-1", *target, "--json")
        assert json.loads(out)["owner"] is None  # the command's engine let go of the parked run
        before = dict(storage.scan(keys.workflow_partition("ap-1")))
        status, out, err = weft(capsys, "query", "ap-1", "status", *target, *EXAMPLES)
        assert (status, json.loads(out)["stage"]) == (0, "awaiting-approver"), err
        assert dict(storage.scan(keys.workflow_partition("ap-1"))) == before
        comment = json.dumps({"by": "ada", "text": "ok"})
        status, out, err = weft(
            capsys, "update", "ap-1", "comment", "--payload", comment, *target, *EXAMPLES
        )
        assert (status, out.strip()) == (0, "1"), err
        status, out, _ = weft(capsys, "suspend", "ap-1", *target)
        assert (status, out.strip()) == (0, "ap-1 is suspended")
    finally:
        app.close()
        client.delete_table(TableName=table)
