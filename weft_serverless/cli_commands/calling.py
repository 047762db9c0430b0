"""Commands that carry out an API operation: through ``aws.calls.call``, as the HTTP API does.

The route table defines each operation's fields and what refuses them; a command only turns
its arguments into path parameters, query and body (parsing JSON options and numbers from
text), and the answer into its output. So ``weft`` refuses exactly what the API refuses,
with the same code, and ``--json`` prints the API's body.

``COMMANDS`` names the command of every route, so a route without one fails a test.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from contextlib import redirect_stdout
from typing import Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.target import UsageError, load_workflows, operator_engine

COMMANDS: dict[str, str] = {
    "start_workflow": "start",
    "list_workflows": "list",
    "count_workflows": "count",
    "describe_workflow": "describe",
    "get_result": "result",
    "list_events": "events",
    "signal_workflow": "signal",
    "update_workflow": "update",
    "query_workflow": "query",
    "cancel_workflow": "cancel",
    "suspend_workflow": "suspend",
    "resume_workflow": "resume",
    "retry_workflow": "retry",
    "purge_workflow": "purge",
    "create_schedule": "schedule create",
    "list_schedules": "schedule list",
    "describe_schedule": "schedule show",
    "delete_schedule": "schedule delete",
    "pause_schedule": "schedule pause",
    "resume_schedule": "schedule resume",
    "trigger_schedule": "schedule trigger",
    "backfill_schedule": "schedule backfill",
    "bulk_cancel": "cancel-all",
    "bulk_signal": "signal-all",
    "bulk_retry": "retry-failed-all",
    "list_bulk": "bulk list",
    "describe_bulk": "bulk show",
    "complete_activity": "activity complete",
    "fail_activity": "activity fail",
}
"""The ``weft`` command (words after ``weft``) of each API operation (``Route.operation``)."""


def carry_out(
    args: argparse.Namespace,
    operation: str,
    *,
    params: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
    writes: bool = True,
    actor: str | None = None,
) -> Any:
    """The API's answer body for ``operation`` (see ``reply``)."""
    answer = reply(
        args, operation, params=params, query=query, body=body, writes=writes, actor=actor
    )
    return answer[1]


def reply(
    args: argparse.Namespace,
    operation: str,
    *,
    params: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
    writes: bool = True,
    actor: str | None = None,
) -> tuple[int, Any]:
    """Carry out ``operation`` on the store ``args`` names; return the API's status and body.

    With ``--workflows`` the engine holds the definitions, so a run the operation wakes is
    driven here; what its activities print goes to stderr, keeping stdout for the answer
    (valid JSON with ``--json``). Errors propagate: ``ApiError`` for an input the route
    refuses, the engine's ``WeftError`` otherwise; ``weft`` maps both to an exit status.
    """
    from weft_serverless.aws.calls import call

    module = getattr(args, "workflows", None)
    workflows = load_workflows(module) if module else None
    with (
        redirect_stdout(sys.stderr),
        operator_engine(args, writes=writes, workflows=workflows) as engine,
    ):
        return call(engine, operation, params=params, query=query, body=body, actor=actor)


def require_workflows(args: argparse.Namespace, command: str, why: str) -> None:
    """Refuse, as a usage error, a command that cannot work without the definitions."""
    if not getattr(args, "workflows", None):
        raise UsageError(f"weft {command} needs --workflows MODULE: {why}")


def add_workflows_option(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--workflows", metavar="MODULE", help=text)


DRIVE_HELP = (
    "module with a 'workflows' dict: drive the woken run here; without it the change is "
    "stored and the run's owner or the next maintenance pass carries on"
)


def json_option(text: str | None, flag: str) -> Any:
    """The value of a JSON option; text that is not JSON is a usage error naming the flag."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not JSON: {exc}") from None


def number_or_text(text: str | None) -> float | str | None:
    """A duration or instant as the API takes it: seconds as a number, else the text
    (``'5m'``, an ISO 8601 time) for the route and the engine to judge."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def given(**fields: Any) -> dict[str, Any]:
    """The fields that were given: an option left out stays out of the body, as over HTTP."""
    return {name: value for name, value in fields.items() if value is not None}


def print_json(value: Any) -> None:
    print(render.dumps(value))
