"""CLI parity with the HTTP API: every route has a ``weft`` command, and the commands carry the
operation out through ``calls.call`` on a SQLite store (the new start, describe, query,
update, suspend, resume, retry, purge, activity complete|fail and schedule backfill; and
signal, list, count, the schedule and bulk commands moved onto it): the same answer body
(``--json``), the same refusals with the route's messages (a 400 exits 2), nothing stored
when refused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cli_remote_flows
import pytest
from dynamodb_support import MotoEnvironment, moto, new_table

from examples import approval, order, order_saga
from examples.workflows import workflows
from weft_serverless import Engine, SQLiteStorage
from weft_serverless.aws.calls import ROUTE_OF, call
from weft_serverless.cli import _parser, main
from weft_serverless.cli_commands.calling import COMMANDS
from weft_serverless.cli_commands.target import reader_engine
from weft_serverless.storage import keys
from weft_serverless.storage.dynamodb import DynamoDBStorage

__all__ = ["moto"]  # a fixture from dynamodb_support

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("--workflows", "examples.workflows")


def weft(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A parked approval (exp-7), a completed saga (saga-ok), a failed order (order-declined)."""
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    with Engine.create(storage, workflows, background_tasks="manual") as engine:
        engine.start("approval", approval.SAMPLE_INPUT, id="exp-7")
        engine.start("order_saga", order_saga.SAMPLE_INPUT, id="saga-ok")
        declined = {**order.SAMPLE_ORDER, "order_id": "A-2", "card_last4": "0000"}
        engine.start("order", declined, id="order-declined")
    storage.close()
    return path


def stored(path: Path, workflow_id: str) -> dict[str, Any]:
    """Every record of a run, to prove a command wrote nothing."""
    storage = SQLiteStorage(path)
    try:
        return dict(storage.scan(keys.workflow_partition(workflow_id)))
    finally:
        storage.close()


def api(path: Path, operation: str, **params: str) -> Any:
    """What the API answers for a read, through the one path every front end uses."""
    storage = SQLiteStorage(path)
    engine = reader_engine(storage, "test-reader")
    try:
        return call(engine, operation, params=params)[1]
    finally:
        engine.close()
        storage.close()


def subcommand_names(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    """Every command path of ``parser``: ``start``, ``schedule backfill``, ..."""
    names: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                names.add(prefix + name)
                names |= subcommand_names(sub, f"{prefix}{name} ")
    return names


def test_every_api_route_has_a_weft_command() -> None:
    assert set(COMMANDS) == set(ROUTE_OF)
    assert set(COMMANDS.values()) <= subcommand_names(_parser())


@pytest.mark.parametrize("command", ["list", "count"])
def test_list_and_count_take_every_filter_of_their_route(command: str) -> None:
    operation = {"list": "list_workflows", "count": "count_workflows"}[command]
    parser = next(
        action.choices[command]
        for action in _parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    options = {option.dest for option in parser._actions}
    for field in ROUTE_OF[operation].query:
        assert field.name in options, field.name


def test_signal_refuses_what_the_api_refuses(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    """``weft signal`` carries out the API's operation: a signal id over the route's 128
    characters is refused, naming the field, and nothing is stored."""
    before = stored(db, "exp-7")
    status, out, err = weft(
        capsys, "signal", "exp-7", "approve", "--signal-id", "s" * 129, "--db", str(db)
    )
    assert (status, out) == (2, "")
    assert err.startswith("weft: InvalidArgumentError: signal_id: must be at most 128")
    assert stored(db, "exp-7") == before


def test_list_and_count_refuse_what_the_api_refuses(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """``weft list`` and ``weft count`` carry out the API's operations: its page size limit and
    its messages naming the field."""
    status, out, err = weft(capsys, "list", "--db", str(db), "--limit", "1001")
    assert (status, out) == (2, "")
    assert err.startswith("weft: InvalidArgumentError: limit: must be at most 1000")
    status, out, err = weft(capsys, "count", "--db", str(db), "--status", "sleeping")
    assert (status, out) == (2, "")
    assert err.startswith("weft: InvalidArgumentError: status: must be one of")
    status, out, _ = weft(capsys, "count", "--db", str(db), "--json")
    answer = api(db, "count_workflows")
    assert json.loads(out)["counts"] == [[c["value"], c["count"]] for c in answer["counts"]]


# -- start and describe ---------------------------------------------------------------------


def test_start_drives_the_run_and_prints_the_apis_workflow(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    status, out, err = weft(
        capsys,
        *("start", "order_saga", "--input", json.dumps(order_saga.SAMPLE_INPUT)),
        *("--id", "saga-2", "--tag", "vip", "--search-attributes", "{}", "--wait", "1"),
        *("--db", str(db), *EXAMPLES, "--json"),
    )
    assert status == 0, err
    started = json.loads(out)
    assert (started["id"], started["status"]) == ("saga-2", "completed")
    assert started["result"]["status"] == "shipped"
    # describe --json prints exactly the API's Workflow object
    status, out, _ = weft(capsys, "describe", "saga-2", "--db", str(db), "--json")
    assert status == 0
    assert json.loads(out) == json.loads(
        json.dumps(api(db, "describe_workflow", workflow_id="saga-2"))
    )
    _, out, _ = weft(capsys, "list", "--db", str(db), "--tag", "vip", "--json")
    assert [row["id"] for row in json.loads(out)["workflows"]] == ["saga-2"]


def test_describe_prints_fields_and_failed_attempts(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    status, out, _ = weft(capsys, "describe", "order-declined", "--db", str(db))
    assert status == 0
    lines = out.splitlines()
    assert "status    failed" in lines
    assert any(line.startswith("error") and "CardDeclinedError" in line for line in lines)
    assert "failed attempts:" in lines
    status, _, err = weft(capsys, "describe", "nope", "--db", str(db))
    assert status == 1 and err.startswith("weft: WorkflowNotFoundError: ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "weft start needs --workflows MODULE"),
        ([*EXAMPLES, "--wait", "99"], "weft: InvalidArgumentError: wait_seconds: must be at most"),
        ([*EXAMPLES, "--execution-timeout", "soon"], "execution_timeout 'soon' is not a duration"),
        ([*EXAMPLES, "--start-at", "tomorrow"], "start_at"),
        ([*EXAMPLES, "--input", "{oops"], "weft: --input is not JSON"),
        ([*EXAMPLES, "--search-attributes", "[1]"], "search_attributes: must be an object"),
        ([*EXAMPLES, "--id", ""], "id: must not be empty"),
    ],
)
def test_start_refuses_what_the_api_refuses_and_stores_nothing(
    capsys: pytest.CaptureFixture[str], db: Path, argv: list[str], message: str
) -> None:
    status, out, err = weft(capsys, "start", "approval", "--id", "new-1", "--db", str(db), *argv)
    assert (status, out) == (2, "")
    assert message in err
    assert stored(db, "new-1") == {}


def test_start_of_an_unknown_type_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    status, _, err = weft(capsys, "start", "nope", "--id", "n-1", "--db", str(db), *EXAMPLES)
    assert status == 2 and err.startswith("weft: UnknownWorkflowTypeError: ")
    assert stored(db, "n-1") == {}


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


# -- bulk -------------------------------------------------------------------------------------


def test_bulk_commands_carry_out_the_bulk_routes(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """A bulk command's body is the route's: its limits apply (``reason`` up to 1,000
    characters), ``--actor`` reaches the audit record, and ``--json`` is the API's body."""
    store = ("--db", str(db))
    status, out, err = weft(
        capsys, "cancel-all", "--type", "approval", "--dry-run", "--reason", "r" * 1001, *store
    )
    assert (status, out) == (2, "")
    assert err.startswith("weft: InvalidArgumentError: reason: must be at most 1000 characters")
    _, out, _ = weft(capsys, "cancel-all", "--type", "approval", "--dry-run", *store, "--json")
    token = json.loads(out)["token"]
    status, out, err = weft(
        capsys,
        *("cancel-all", "--type", "approval", "--confirm", token, "--actor", "ops-bot"),
        *(*store, "--json"),
    )
    assert status == 0, err
    record = json.loads(out)
    assert (record["actor"], record["filter"], record["done"]) == (
        "ops-bot",
        {"workflow_type": "approval"},
        1,
    )
    _, out, _ = weft(capsys, "bulk", "show", record["id"], *store, "--json")
    assert json.loads(out) == json.loads(
        json.dumps(api(db, "describe_bulk", operation_id=record["id"]))
    )


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


# -- as a program ------------------------------------------------------------------------------


def test_start_and_describe_as_a_program(db: Path) -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "weft_serverless.cli", *argv, "--db", str(db)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)

    started = run("start", "approval", "--input", json.dumps(approval.SAMPLE_INPUT), *EXAMPLES)
    assert started.returncode == 0, started.stderr
    assert "status    running" in started.stdout.splitlines()
    assert "[notify]" in started.stderr  # the activity's print, kept off stdout
    refused = run("start", "approval")
    assert refused.returncode == 2 and "needs --workflows MODULE" in refused.stderr
