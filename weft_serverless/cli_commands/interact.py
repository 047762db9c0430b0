"""``weft query``, ``weft update`` and ``weft activity complete|fail``: talking to a running
workflow, each through its API operation (``calling.carry_out``).

A query and an update run the workflow's own handlers, so both need the workflows module: a
query replays the run in memory on a read-only engine (it writes nothing); an update is
applied through an engine in the store's own mode, which drives the run on. Completing or
failing an asynchronous activity stores the outcome; with ``--workflows`` the woken run is
driven here too.
"""

from __future__ import annotations

import argparse
from typing import Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.calling import (
    DRIVE_HELP,
    add_workflows_option,
    carry_out,
    given,
    json_option,
    print_json,
    require_workflows,
)
from weft_serverless.cli_commands.target import add_target_arguments

HANDLERS_HELP = "module with a 'workflows' dict: its handlers answer (required)"


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``query``, ``update`` and ``activity`` on ``weft``'s subparsers."""
    query = subcommands.add_parser(
        "query", help="answer a query from a workflow's current state (writes nothing)"
    )
    query.add_argument("id", help="workflow id")
    query.add_argument("name", help="query name")
    query.add_argument("--arg", help="the query's argument, as JSON")
    add_workflows_option(query, HANDLERS_HELP)
    add_target_arguments(query)
    query.set_defaults(handler=cmd_query)

    update = subcommands.add_parser("update", help="apply an update and print its result")
    update.add_argument("id", help="workflow id")
    update.add_argument("name", help="update name")
    update.add_argument("--payload", help="the update's payload, as JSON")
    update.add_argument("--update-id", help="deduplication id: a repeat is applied once")
    add_workflows_option(update, HANDLERS_HELP)
    add_target_arguments(update)
    update.set_defaults(handler=cmd_update)

    activity = subcommands.add_parser(
        "activity", help="complete or fail an asynchronous activity by its token"
    )
    actions = activity.add_subparsers(title="activity commands", metavar="ACTION")
    complete = actions.add_parser("complete", help="complete it with a result")
    complete.add_argument("token", help="the token complete_async() returned")
    complete.add_argument("--result", help="the activity's result, as JSON")
    fail = actions.add_parser("fail", help="fail this attempt; its retry policy decides")
    fail.add_argument("token", help="the token complete_async() returned")
    fail.add_argument("--message", required=True, help="what went wrong")
    fail.add_argument("--error-type", help="error type the workflow sees (default ActivityError)")
    for parser in (complete, fail):
        add_workflows_option(parser, DRIVE_HELP)
        add_target_arguments(parser)
    complete.set_defaults(handler=cmd_complete)
    fail.set_defaults(handler=cmd_fail)


def cmd_query(args: argparse.Namespace) -> int:
    require_workflows(args, "query", "a query runs the workflow's own handler on its replay")
    answer = carry_out(
        args,
        "query_workflow",
        params={"workflow_id": args.id, "name": args.name},
        body=given(arg=json_option(args.arg, "--arg")),
        writes=False,
    )
    _print_result(args, answer)
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    require_workflows(args, "update", "an update runs the workflow's own handler")
    answer = carry_out(
        args,
        "update_workflow",
        params={"workflow_id": args.id, "name": args.name},
        body=given(payload=json_option(args.payload, "--payload"), update_id=args.update_id),
    )
    _print_result(args, answer)
    return 0


def cmd_complete(args: argparse.Namespace) -> int:
    body = given(token=args.token, result=json_option(args.result, "--result"))
    return _accepted(args, carry_out(args, "complete_activity", body=body), "completed")


def cmd_fail(args: argparse.Namespace) -> int:
    body = given(token=args.token, message=args.message, error_type=args.error_type)
    return _accepted(args, carry_out(args, "fail_activity", body=body), "failed")


def _print_result(args: argparse.Namespace, answer: dict[str, Any]) -> None:
    """The API's body with ``--json``; else the handler's result, as indented JSON."""
    if args.json:
        print_json(answer)
    else:
        print(render.dumps(answer["result"], pretty=True))


def _accepted(args: argparse.Namespace, answer: dict[str, Any], what: str) -> int:
    if args.json:
        print_json(answer)
    else:
        print(f"activity {what}")
    return 0
