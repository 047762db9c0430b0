"""Operator commands against a store: ``weft list``, ``show``, ``signal``, ``cancel``, ``result``.

``list``, ``result``, ``signal`` and ``cancel`` carry out the API's operations
(``calling.carry_out``), so the same fields are refused and the same rules hold as for the
application and the API: a signal is buffered and its wake-up timer written atomically; a
cancel under workflow-lease rotates the epoch so a still-running owner stops at its next
write. ``show`` reads more than any route returns (the step timeline, the owner), through a
read-only ``Engine`` (``target.operator_engine``). Output is an aligned table for people, or
one JSON document with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from weft_serverless.cli_commands import finding, render
from weft_serverless.cli_commands.calling import (
    DRIVE_HELP,
    add_workflows_option,
    carry_out,
    given,
    json_option,
    reply,
)
from weft_serverless.cli_commands.target import add_target_arguments, operator_engine

if TYPE_CHECKING:
    from weft_serverless import Owner, WorkflowDescription

# ``weft result`` exit status for a run that has not finished (0 done, 1 failed or error).
NOT_FINISHED_EXIT = 3


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare the operator subcommands on ``weft``'s subparsers."""
    listing = subcommands.add_parser(
        "list", help="list workflows by status, type, search attributes and tags"
    )
    finding.add_filter_arguments(listing)
    listing.add_argument("--order", choices=("oldest", "newest"), default="oldest")
    listing.add_argument("--limit", type=int, default=50, help="rows per page (default: 50)")
    listing.add_argument("--cursor", help="continue after a previous page")
    listing.add_argument(
        "--counts",
        choices=("status",),
        help="also count the runs of each status under the filters but --status",
    )
    add_target_arguments(listing)
    listing.set_defaults(handler=cmd_list)
    finding.add(subcommands)

    show = subcommands.add_parser("show", help="one workflow: state, owner and step timeline")
    show.add_argument("id", help="workflow id")
    add_target_arguments(show)
    show.set_defaults(handler=cmd_show)

    signal = subcommands.add_parser("signal", help="send a signal to a workflow")
    signal.add_argument("id", help="workflow id")
    signal.add_argument("name", help="signal name")
    signal.add_argument("--payload", default="null", help="JSON payload (default: null)")
    signal.add_argument("--signal-id", help="deduplication id: a repeat is delivered once")
    add_workflows_option(signal, DRIVE_HELP)
    add_target_arguments(signal)
    signal.set_defaults(handler=cmd_signal)

    cancel = subcommands.add_parser("cancel", help="cancel a workflow")
    cancel.add_argument("id", help="workflow id")
    add_workflows_option(cancel, DRIVE_HELP)
    add_target_arguments(cancel)
    cancel.set_defaults(handler=cmd_cancel)

    result = subcommands.add_parser(
        "result",
        help="a workflow's result",
        description=(
            f"Print the result of a finished workflow. Exit 0 when it completed, 1 when it "
            f"failed, was cancelled or timed out, {NOT_FINISHED_EXIT} when it is not finished."
        ),
    )
    result.add_argument("id", help="workflow id")
    add_target_arguments(result)
    result.set_defaults(handler=cmd_result)


def cmd_list(args: argparse.Namespace) -> int:
    query = given(limit=args.limit, cursor=args.cursor, order=args.order, counts=args.counts)
    page = carry_out(
        args, "list_workflows", query={**query, **finding.filters_of(args)}, writes=False
    )
    rows, cursor, counts = page["items"], page["next_cursor"], page.get("counts")
    if args.json:  # the page as weft list has always printed it: "workflows", "type"
        out = {
            "workflows": [
                {
                    "id": row["id"],
                    "type": row["workflow_type"],
                    "status": row["status"],
                    "created_at": row["created_at"],
                    "search_attributes": row["search_attributes"],
                    "tags": row["tags"],
                }
                for row in rows
            ],
            "next_cursor": cursor,
            **({} if counts is None else {"counts": counts}),
        }
        print(render.dumps(out))
        return 0
    if counts is not None:
        print("counts: " + (", ".join(f"{c['value']} {c['count']}" for c in counts) or "none"))
    if not rows:
        print("no workflows")
        return 0
    cells = [
        [r["id"], r["workflow_type"], r["status"], render.timestamp(r["created_at"])] for r in rows
    ]
    print(render.table(("ID", "TYPE", "STATUS", "CREATED (UTC)"), cells))
    if cursor is not None:
        print(f"\nmore: weft list ... --cursor '{cursor}'")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from weft_serverless import inspect_workflow

    with operator_engine(args) as engine:
        seen = inspect_workflow(engine, args.id)
    description, owner, history = seen.description, seen.owner, seen.history
    steps, failures, buffered = history.steps, history.failed_attempts, history.buffered_signals
    if args.json:
        out = {
            **_description_json(description),
            "owner": None if owner is None else owner.as_json(),
            "steps": [step.as_json() for step in steps],
            "failed_attempts": list(failures),
            "buffered_signals": dict(buffered),
            "teardown": description.teardown,
        }
        print(render.dumps(out))
        return 0
    fields = [
        ("workflow", description.id),
        ("type", f"{description.workflow_type} (version {description.version})"),
        ("status", description.status),
        *([("run", str(description.run))] if description.run > 1 else []),
        ("created", render.timestamp(description.created_at)),
        ("updated", render.timestamp(description.updated_at)),
    ]
    if description.parent_id:
        fields.append(("parent", description.parent_id))
    fields.append(("owner", _owner_text(owner)))
    fields.append(("input", render.dumps(description.input)))
    if description.status == "completed":
        fields.append(("result", render.dumps(description.result)))
    if description.error:
        error = description.error
        fields.append(("error", f"{error.get('type', '')}: {error.get('message', '')}"))
    if buffered:
        fields.append(("signals", ", ".join(f"{n} x{c}" for n, c in sorted(buffered.items()))))
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")
    print()
    if steps:
        print(render.table(render.STEP_HEADERS, render.step_rows(steps)))
    else:
        print("no steps recorded yet")
    if failures:
        print("\nfailed attempts (newest 10 retried ones per step, and each final failure):")
        print(render.table(render.FAILURE_HEADERS, render.failure_rows(failures)))
        if render.tracebacks(failures):
            print("\ntracebacks:\n" + render.tracebacks(failures))
    if description.teardown is not None:
        _print_teardown(description.teardown)
    return 0


def _print_teardown(teardown: dict[str, Any]) -> None:
    """The finalizers its end runs (ADR 0027), in the order they run."""
    print(f"\nteardown after {teardown['reason']}: {teardown['status']}")
    rows = [
        [
            f"{item['position']} {item['activity']}",
            item["state"],
            str(item["attempts"]),
            _error_text(item["last_error"]),
        ]
        for item in teardown["finalizers"]
    ]
    print(render.table(("FINALIZER", "STATE", "ATTEMPTS", "LAST ERROR"), rows))


def _owner_text(owner: Owner | None) -> str:
    if owner is None:
        return "- (no per-workflow ownership in this store)"
    holder = owner.holder
    if holder is None:
        return f"none: no engine holds it (epoch {owner.epoch})"
    expires = holder.expires_at
    return (
        f"engine {holder.engine_id} (epoch {holder.epoch}), claim expires "
        f"{render.timestamp(expires)} ({render.relative(expires)})"
    )


def _description_json(description: WorkflowDescription) -> dict[str, Any]:
    return {
        "id": description.id,
        "type": description.workflow_type,
        "version": description.version,
        "status": description.status,
        "run": description.run,
        "created_at": description.created_at,
        "updated_at": description.updated_at,
        "parent_id": description.parent_id,
        "input": description.input,
        "result": description.result,
        "error": description.error,
    }


def cmd_signal(args: argparse.Namespace) -> int:
    answer = carry_out(
        args,
        "signal_workflow",
        params={"workflow_id": args.id, "name": args.name},
        body=given(payload=json_option(args.payload, "--payload"), signal_id=args.signal_id),
    )
    if args.json:
        print(render.dumps(answer))
    else:
        print(f"signal {args.name!r} stored for {args.id} (status now: {answer['status']})")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with operator_engine(args) as reader:
        before = reader.describe(args.id)
    if before.is_terminal:  # the API refuses this (409); here it is a no-op said plainly
        status = before.status
    else:
        status = carry_out(args, "cancel_workflow", params={"workflow_id": args.id})["status"]
    if args.json:
        print(render.dumps({"id": args.id, "status": status}))
    elif before.is_terminal:
        print(f"{args.id} is already {status}; nothing to cancel")
    else:
        print(f"{args.id} is {status}")
    return 0


def cmd_result(args: argparse.Namespace) -> int:
    code, answer = reply(args, "get_result", params={"workflow_id": args.id}, writes=False)
    status, finished = answer["status"], code == 200  # 202: still running
    if args.json:
        print(render.dumps(answer))
    elif status == "completed":
        print(render.dumps(answer["result"], pretty=True))
    elif finished:
        error = answer["error"] or {}
        detail = f": {error.get('type', '')}: {error.get('message', '')}" if error else ""
        print(f"weft: {args.id} is {status}{detail}", file=sys.stderr)
    else:
        print(f"weft: {args.id} is {status}, not finished", file=sys.stderr)
    if status == "completed":
        return 0
    return 1 if finished else NOT_FINISHED_EXIT


def _error_text(error: dict[str, Any] | None) -> str:
    return "" if not error else f"{error.get('type', '')}: {error.get('message', '')}"
