"""``weft start``, ``describe``, ``suspend``, ``resume``, ``retry`` and ``purge``: a run's life
from the command line, each through its API operation (``calling.carry_out``).

``start`` needs the workflows module: the engine refuses a type it has no definition of, and
the new run is driven here up to its first wait. ``resume`` and ``retry`` take it optionally,
to drive the run here rather than leave it to its owner or the next maintenance pass.
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
    number_or_text,
    print_json,
    require_workflows,
)
from weft_serverless.cli_commands.target import add_target_arguments


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare the run-control commands on ``weft``'s subparsers."""
    start = subcommands.add_parser(
        "start",
        help="start a workflow and drive it here up to its first wait",
        description=(
            "Start a workflow (POST /workflows). Needs --workflows: the engine only starts a "
            "type it has the definition of, and runs it here until it waits or ends."
        ),
    )
    start.add_argument("workflow_type", metavar="TYPE", help="the workflow type")
    start.add_argument("--input", help="the workflow's input, as JSON")
    start.add_argument("--id", help="workflow id (default: a random one)")
    start.add_argument("--idempotency-key", help="a repeat with this key returns the first run")
    start.add_argument("--execution-timeout", help="end the run timed-out after this long")
    start.add_argument("--start-at", help="start later: epoch seconds or ISO 8601 with a zone")
    start.add_argument("--start-after", help="start after this delay, e.g. 90s, 5m")
    start.add_argument("--search-attributes", metavar="JSON", help="a JSON object of values")
    start.add_argument(
        "--tag", dest="tags", action="append", help="a tag to find the run by (repeatable)"
    )
    start.add_argument(
        "--wait", type=float, metavar="SECONDS", help="wait up to this long for the result"
    )
    add_workflows_option(start, "module with a 'workflows' dict holding TYPE (required)")
    add_target_arguments(start)
    start.set_defaults(handler=cmd_start)

    describe = subcommands.add_parser(
        "describe", help="a workflow as the API describes it (GET /workflows/{id})"
    )
    describe.add_argument("id", help="workflow id")
    add_target_arguments(describe)
    describe.set_defaults(handler=cmd_describe)

    for name, text, drives in (
        ("suspend", "pause a workflow until it is resumed", False),
        ("resume", "resume a suspended workflow", True),
        ("retry", "re-run a failed workflow from its last good step", True),
        ("purge", "delete a finished workflow's records now", False),
    ):
        parser = subcommands.add_parser(name, help=text)
        parser.add_argument("id", help="workflow id")
        if drives:
            add_workflows_option(parser, DRIVE_HELP)
        add_target_arguments(parser)
        parser.set_defaults(handler=cmd_control, action=name)


def cmd_start(args: argparse.Namespace) -> int:
    require_workflows(args, "start", "the engine only starts a type it has the definition of")
    body = given(
        workflow_type=args.workflow_type,
        input=json_option(args.input, "--input"),
        id=args.id,
        idempotency_key=args.idempotency_key,
        execution_timeout=number_or_text(args.execution_timeout),
        start_at=number_or_text(args.start_at),
        start_after=number_or_text(args.start_after),
        search_attributes=json_option(args.search_attributes, "--search-attributes"),
        tags=args.tags,
        wait_seconds=args.wait,
    )
    workflow = carry_out(args, "start_workflow", body=body)
    if args.json:
        print_json(workflow)
    else:
        print_workflow(workflow)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    workflow = carry_out(args, "describe_workflow", params={"workflow_id": args.id}, writes=False)
    if args.json:
        print_json(workflow)
    else:
        print_workflow(workflow)
    return 0


def cmd_control(args: argparse.Namespace) -> int:
    answer = carry_out(args, f"{args.action}_workflow", params={"workflow_id": args.id})
    if args.json:
        print_json(answer)
    elif args.action == "purge":
        print(f"{args.id} purged")
    else:
        print(f"{answer['id']} is {answer['status']}")
    return 0


def print_workflow(workflow: dict[str, Any]) -> None:
    """The API's ``Workflow`` object as aligned fields, then its failed attempts."""
    fields = [
        ("workflow", workflow["id"]),
        ("type", f"{workflow['workflow_type']} (version {workflow['version']})"),
        ("status", workflow["status"]),
        *([("run", str(workflow["run"]))] if workflow["run"] > 1 else []),
        ("created", render.timestamp(workflow["created_at"])),
        ("updated", render.timestamp(workflow["updated_at"])),
    ]
    if workflow["parent_id"]:
        fields.append(("parent", workflow["parent_id"]))
    if workflow["owner"] is not None:
        fields.append(("owner", render.dumps(workflow["owner"])))
    if workflow["concurrency_key"] is not None:
        fields.append(("concurrency", workflow["concurrency_key"]))
    fields.append(("input", render.dumps(workflow["input"])))
    if workflow["status"] == "completed":
        fields.append(("result", render.dumps(workflow["result"])))
    error = workflow["error"]
    if error:
        fields.append(("error", f"{error.get('type', '')}: {error.get('message', '')}"))
    if "teardown" in workflow:
        fields.append(("teardown", workflow["teardown"]["status"]))
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")
    failures = workflow.get("failed_attempts")
    if failures:
        print("\nfailed attempts:")
        print(render.table(render.FAILURE_HEADERS, render.failure_rows(failures)))
        if render.tracebacks(failures):
            print("\ntracebacks:\n" + render.tracebacks(failures))
