"""``weft cancel-all``, ``signal-all``, ``retry-failed-all`` and ``weft bulk list|show``.

A bulk command is run twice: with ``--dry-run`` it prints how many runs match and a token;
with ``--confirm TOKEN`` (same filters) it acts and prints the operation's record. Filters are
``--status``, ``--type`` and, for any other filter ``list`` takes, ``--filter NAME=JSON``.
Each carries out the API's bulk operation (``calling.carry_out``; ``--actor`` goes in as the
record's actor), so ``--json`` prints the API's body. Writes go through an engine in the
store's own mode (the fence its engines expect).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.calling import carry_out, given, json_option
from weft_serverless.cli_commands.target import UsageError, add_target_arguments


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare the bulk commands on ``weft``'s subparsers."""
    for command, text in (
        ("cancel-all", "cancel every run the filters match"),
        ("signal-all", "signal every run the filters match, once each"),
        ("retry-failed-all", "retry every failed run the filters match"),
    ):
        parser = subcommands.add_parser(command, help=text)
        if command == "signal-all":
            parser.add_argument("name", help="signal name")
            parser.add_argument("--payload", help="JSON payload (default: null)")
        parser.add_argument("--status", help="only runs of this status")
        parser.add_argument("--type", dest="workflow_type", help="only this workflow type")
        parser.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="NAME=JSON",
            help="any other filter of list, e.g. --filter 'id_prefix=\"order-\"'",
        )
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument("--dry-run", action="store_true", help="count and print a token")
        mode.add_argument("--confirm", metavar="TOKEN", help="the token of the dry run")
        parser.add_argument("--reason", help="why, kept in the audit record")
        parser.add_argument("--actor", help="who, kept in the audit record (default: the CLI)")
        parser.add_argument(
            "--workflows",
            metavar="MODULE",
            help="module with a 'workflows' dict: drive woken runs here (else maintenance does)",
        )
        add_target_arguments(parser)
        parser.set_defaults(handler=cmd_bulk, command=command)

    bulk = subcommands.add_parser("bulk", help="bulk operations and their audit records")
    actions = bulk.add_subparsers(title="bulk commands", metavar="ACTION")
    listing = actions.add_parser("list", help="every bulk operation, oldest first")
    add_target_arguments(listing)
    listing.set_defaults(handler=cmd_list)
    show = actions.add_parser("show", help="one bulk operation")
    show.add_argument("id", help="operation id")
    add_target_arguments(show)
    show.set_defaults(handler=cmd_show)


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    for item in args.filter:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--filter takes NAME=JSON, got {item!r}")
        try:
            filters[name] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--filter {name}: the value is not JSON: {exc}") from None
    if args.status is not None:
        filters["status"] = args.status
    if args.workflow_type is not None:
        filters["workflow_type"] = args.workflow_type
    return filters


OPERATIONS = {
    "cancel-all": "bulk_cancel",
    "signal-all": "bulk_signal",
    "retry-failed-all": "bulk_retry",
}


def cmd_bulk(args: argparse.Namespace) -> int:
    body = given(
        filter=_filters(args),
        dry_run=args.dry_run or None,
        confirm=args.confirm,
        reason=args.reason,
    )
    if args.command == "signal-all":
        body.update(given(name=args.name, payload=json_option(args.payload, "--payload")))
    _print(args, carry_out(args, OPERATIONS[args.command], body=body, actor=args.actor))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = carry_out(args, "list_bulk", writes=False)["items"]
    if args.json:
        print(render.dumps({"operations": rows}))
        return 0
    if not rows:
        print("no bulk operations")
        return 0
    cells = [
        [
            r["id"],
            r["kind"],
            r["status"],
            render.timestamp(r["created_at"]),
            r["actor"],
            f"{r['done']}/{r['skipped']}/{r['failed']}",
        ]
        for r in rows
    ]
    print(render.table(("ID", "KIND", "STATUS", "CREATED (UTC)", "ACTOR", "DONE/SKIP/FAIL"), cells))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    params = {"operation_id": args.id}
    _print(args, carry_out(args, "describe_bulk", params=params, writes=False))
    return 0


def _print(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """A dry run (it has a token) or an operation's record, as the API answers them."""
    if args.json:
        print(render.dumps(result))
        return
    if "token" in result:
        print(f"{result['count']} runs match {render.dumps(result['filter'])}")
        print(f"confirm before {render.timestamp(result['expires_at'])} with:")
        print(f"  --confirm {result['token']}")
        return
    caller = result.get("caller")
    fields = [
        ("operation", result["id"]),
        ("kind", result["kind"] + (f" {result['signal']}" if result.get("signal") else "")),
        ("status", result["status"]),
        ("filter", render.dumps(result["filter"])),
        ("actor", result["actor"] + (f" (caller {caller})" if caller else "")),
        ("reason", result.get("reason") or "-"),
        ("created", render.timestamp(result["created_at"])),
        ("finished", render.timestamp(result.get("finished_at"))),
        (
            "counts",
            f"done {result['done']}, skipped {result['skipped']}, failed {result['failed']}",
        ),
    ]
    if result.get("errors"):
        fields.append(
            ("errors", ", ".join(f"{e['workflow_id']} {e['code']}" for e in result["errors"]))
        )
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")
