"""``weft schedule create|list|show|pause|resume|trigger|delete|backfill``: schedules on a store.

Each carries out the API's schedule operation (``calling.carry_out``): reads on a read-only
engine, changes through an engine in the store's own mode, so they carry the fence the
store's engines expect. ``create``, ``trigger`` and ``backfill`` need the workflows module
(``--workflows``): the engine checks the type exists, and a fire starts (and here drives) a
run. ``--json`` prints the API's ``Schedule`` body.
"""

from __future__ import annotations

import argparse
from typing import Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.calling import carry_out, given, json_option, number_or_text
from weft_serverless.cli_commands.target import add_target_arguments


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``weft schedule`` and its subcommands."""
    schedule = subcommands.add_parser("schedule", help="cron and interval schedules")
    actions = schedule.add_subparsers(title="schedule commands", metavar="ACTION")

    create = actions.add_parser("create", help="create a schedule")
    create.add_argument("id", help="schedule id (its runs' ids add the fire time)")
    create.add_argument("workflow_type", help="the workflow type each fire starts")
    timing = create.add_mutually_exclusive_group(required=True)
    timing.add_argument("--cron", help="cron expression, e.g. '0 2 * * *'")
    timing.add_argument("--every", help="interval, e.g. '15m'")
    create.add_argument("--input", help="JSON input of every run")
    create.add_argument("--timezone", help="IANA time zone of --cron (default: UTC)")
    create.add_argument("--overlap", help="skip (default), queue, cancel_running or allow")
    create.add_argument("--catchup-window", help="a fire found later is missed (default: 5m)")
    create.add_argument("--jitter", help="delay each fire by up to this, deterministically")
    create.add_argument("--start-at", help="no fire before: epoch seconds or ISO 8601")
    create.add_argument("--end-at", help="no fire after: epoch seconds or ISO 8601")
    _workflows_option(create)
    add_target_arguments(create)
    create.set_defaults(handler=cmd_create)

    listing = actions.add_parser("list", help="every schedule")
    add_target_arguments(listing)
    listing.set_defaults(handler=cmd_list)

    show = actions.add_parser("show", help="one schedule")
    show.add_argument("id", help="schedule id")
    add_target_arguments(show)
    show.set_defaults(handler=cmd_show)

    for name, text in (
        ("pause", "stop firing until resumed"),
        ("resume", "fire again from the next fire after now"),
        ("delete", "delete a schedule (its runs go on)"),
        ("trigger", "fire now; the overlap policy applies"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("id", help="schedule id")
        if name == "trigger":
            _workflows_option(action)
        add_target_arguments(action)
        action.set_defaults(handler=cmd_change, action=name)

    backfill = actions.add_parser(
        "backfill", help="start the fires of a past interval, oldest first"
    )
    backfill.add_argument("id", help="schedule id")
    backfill.add_argument("--start", required=True, help="from: epoch seconds or ISO 8601")
    backfill.add_argument("--end", required=True, help="to (at most now): as --start")
    _workflows_option(backfill)
    add_target_arguments(backfill)
    backfill.set_defaults(handler=cmd_backfill)


def _workflows_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workflows",
        metavar="MODULE",
        required=True,
        help="module with a 'workflows' dict holding the schedule's workflow type",
    )


def cmd_create(args: argparse.Namespace) -> int:
    body = given(
        schedule_id=args.id,
        workflow_type=args.workflow_type,
        input=json_option(args.input, "--input"),
        cron=args.cron,
        every=number_or_text(args.every),
        timezone=args.timezone,
        overlap=args.overlap,
        catchup_window=number_or_text(args.catchup_window),
        jitter=number_or_text(args.jitter),
        start_at=number_or_text(args.start_at),
        end_at=number_or_text(args.end_at),
    )
    _print(args, carry_out(args, "create_schedule", body=body))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    rows = carry_out(args, "list_schedules", writes=False)["items"]
    if args.json:
        print(render.dumps({"schedules": rows}))
        return 0
    if not rows:
        print("no schedules")
        return 0
    cells = [
        [
            r["id"],
            r["workflow_type"],
            _timing(r),
            "paused" if r["paused"] else render.timestamp(r["next_fire_at"]),
            f"{r['fired']}/{r['missed']}/{r['skipped']}",
        ]
        for r in rows
    ]
    print(render.table(("ID", "TYPE", "WHEN", "NEXT FIRE (UTC)", "FIRED/MISSED/SKIPPED"), cells))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    params = {"schedule_id": args.id}
    _print(args, carry_out(args, "describe_schedule", params=params, writes=False))
    return 0


def cmd_change(args: argparse.Namespace) -> int:
    answer = carry_out(args, f"{args.action}_schedule", params={"schedule_id": args.id})
    if args.action == "delete":
        print(render.dumps(answer) if args.json else f"{args.id} deleted")
    elif args.action == "trigger":
        if args.json:
            print(render.dumps(answer))
        else:
            started = answer["workflow_id"]
            print(f"started {started}" if started else "not started (overlap policy)")
    else:
        _print(args, answer)
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    answer = carry_out(
        args,
        "backfill_schedule",
        params={"schedule_id": args.id},
        body={"start": number_or_text(args.start), "end": number_or_text(args.end)},
    )
    if args.json:
        print(render.dumps(answer))
    elif answer["workflow_ids"]:
        print("\n".join(f"started {run}" for run in answer["workflow_ids"]))
    else:
        print("no fires in that interval")
    return 0


def _print(args: argparse.Namespace, described: dict[str, Any]) -> None:
    """The API's ``Schedule`` object: as it is with ``--json``, else as aligned fields."""
    if args.json:
        print(render.dumps(described))
        return
    fields = [
        ("schedule", described["id"]),
        ("type", described["workflow_type"]),
        ("when", _timing(described)),
        ("overlap", described["overlap"]),
        ("paused", "yes" if described["paused"] else "no"),
        ("next fire", render.timestamp(described["next_fire_at"])),
        ("last fire", render.timestamp(described["last_fire_at"])),
        (
            "counts",
            f"fired {described['fired']}, missed {described['missed']}, "
            f"skipped {described['skipped']}",
        ),
        ("running", ", ".join(described["running"]) or "-"),
        ("input", render.dumps(described["input"])),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")


def _timing(described: dict[str, Any]) -> str:
    if described["cron"] is not None:
        return f"cron '{described['cron']}' {described['timezone']}"
    return f"every {described['every']:g} s"
