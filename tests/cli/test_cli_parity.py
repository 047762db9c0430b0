"""CLI parity with the HTTP API: every route has a ``weft`` command, and the commands carry the
operation out through ``calls.call`` on a SQLite store: the same answer body (``--json``), the
same refusals with the route's messages (a 400 exits 2), nothing stored when refused. Here:
the command table, list, count, signal, start, describe and the bulk commands;
``test_cli_interact`` has the rest.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_parity_support import EXAMPLES, REPO, api, db, stored, weft

from examples import approval, order_saga
from weft_serverless.aws.calls import ROUTE_OF
from weft_serverless.cli import _parser
from weft_serverless.cli_commands.calling import COMMANDS

__all__ = ["db"]  # a fixture from cli_parity_support


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
    assert err.startswith(
        "weft: InvalidArgumentError: signal_id: is 129 bytes in UTF-8, over the limit of 128"
    )
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
    # a repeat with the same idempotency key answers with the first run
    again = ("start", "order_saga", "--input", json.dumps(order_saga.SAMPLE_INPUT))
    ids = [
        json.loads(
            weft(capsys, *again, "--idempotency-key", "k-1", "--db", str(db), *EXAMPLES, "--json")[
                1
            ]
        )["id"]
        for _ in range(2)
    ]
    assert ids[0] == ids[1]


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
