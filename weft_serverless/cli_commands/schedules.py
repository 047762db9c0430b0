"""``weft schedule create|list|show|pause|resume|trigger|delete|backfill``: schedules on a store.

Reads go through a read-only engine; changes through an engine in the store's own mode, so
they carry the fence the store's engines expect. ``create`` and ``trigger`` need the
workflows module (``--workflows``): the engine checks the type exists, and a trigger starts
(and here drives) a run; so does ``backfill``, which carries out the API's operation.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import redirect_stdout
from typing import TYPE_CHECKING, Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.calling import carry_out, number_or_text
from weft_serverless.cli_commands.target import (
    UsageError,
    add_target_arguments,
    load_workflows,
    operator_engine,
)

if TYPE_CHECKING:
    from weft_serverless import ScheduleDescription

OVERLAPS = ("skip", "queue", "cancel_running", "allow")


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
    create.add_argument("--input", default="null", help="JSON input of every run")
    create.add_argument("--timezone", default="UTC", help="IANA time zone of --cron")
    create.add_argument("--overlap", choices=OVERLAPS, default="skip")
    create.add_argument("--catchup-window", default="5m", help="a later fire is missed")
    create.add_argument("--jitter", help="delay each fire by up to this, deterministically")
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
    try:
        payload = json.loads(args.input)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--input is not JSON: {exc}") from None
    workflows = load_workflows(args.workflows)
    with operator_engine(args, writes=True, workflows=workflows) as engine:
        handle = engine.schedule(
            args.id,
            args.workflow_type,
            payload,
            cron=args.cron,
            every=args.every,
            timezone=args.timezone,
            overlap=args.overlap,
            catchup_window=args.catchup_window,
            jitter=args.jitter,
        )
        _print(args, handle.describe())
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with operator_engine(args) as engine:
        rows = engine.list_schedules()
    if args.json:
        print(render.dumps({"schedules": [_json(row) for row in rows]}))
        return 0
    if not rows:
        print("no schedules")
        return 0
    cells = [
        [
            r.id,
            r.workflow_type,
            _timing(r),
            "paused" if r.paused else render.timestamp(r.next_fire_at),
            f"{r.fired}/{r.missed}/{r.skipped}",
        ]
        for r in rows
    ]
    print(render.table(("ID", "TYPE", "WHEN", "NEXT FIRE (UTC)", "FIRED/MISSED/SKIPPED"), cells))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with operator_engine(args) as engine:
        described = engine.get_schedule(args.id).describe()
    _print(args, described)
    return 0


def cmd_change(args: argparse.Namespace) -> int:
    workflows = load_workflows(args.workflows) if getattr(args, "workflows", None) else None
    # A triggered run is driven here: what its activities print goes to stderr, so stdout
    # keeps only the command's answer (valid JSON with --json).
    with (
        redirect_stdout(sys.stderr),
        operator_engine(args, writes=True, workflows=workflows) as engine,
    ):
        handle = engine.get_schedule(args.id)
        started: Any = None
        if args.action == "trigger":
            run = handle.trigger()
            started = None if run is None else run.id
        else:
            getattr(handle, args.action)()
        described = None if args.action == "delete" else handle.describe()
    if args.action == "delete":
        print(render.dumps({"id": args.id, "deleted": True}) if args.json else f"{args.id} deleted")
    elif args.action == "trigger":
        if args.json:
            assert described is not None
            print(render.dumps({"schedule": _json(described), "workflow_id": started}))
        else:
            print(f"started {started}" if started else "not started (overlap policy)")
    else:
        assert described is not None
        _print(args, described)
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


def _print(args: argparse.Namespace, described: ScheduleDescription) -> None:
    if args.json:
        print(render.dumps(_json(described)))
        return
    fields = [
        ("schedule", described.id),
        ("type", described.workflow_type),
        ("when", _timing(described)),
        ("overlap", described.overlap),
        ("paused", "yes" if described.paused else "no"),
        ("next fire", render.timestamp(described.next_fire_at)),
        ("last fire", render.timestamp(described.last_fire_at)),
        (
            "counts",
            f"fired {described.fired}, missed {described.missed}, skipped {described.skipped}",
        ),
        ("running", ", ".join(described.running) or "-"),
        ("input", render.dumps(described.input)),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {value}")


def _timing(described: ScheduleDescription) -> str:
    if described.cron is not None:
        return f"cron '{described.cron}' {described.timezone}"
    return f"every {described.every:g} s"


def _json(described: ScheduleDescription) -> dict[str, Any]:
    return {
        "id": described.id,
        "workflow_type": described.workflow_type,
        "cron": described.cron,
        "every": described.every,
        "timezone": described.timezone,
        "overlap": described.overlap,
        "paused": described.paused,
        "next_fire_at": described.next_fire_at,
        "last_fire_at": described.last_fire_at,
        "fired": described.fired,
        "missed": described.missed,
        "skipped": described.skipped,
        "running": list(described.running),
        "queued_fire_at": described.queued_fire_at,
        "input": described.input,
    }
