"""``weft events ID``: a run's event log (``Engine.events``), as a table or JSON lines.

Reads only (the API's ``list_events`` on a read-only engine), so it works on any store and
mode; ``--after`` continues from the last event id printed (the table prints it when a page
is full).
"""

from __future__ import annotations

import argparse
from typing import Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.calling import carry_out, given
from weft_serverless.cli_commands.target import add_target_arguments

SHOWN = ("step", "attempt", "retry", "name", "child_id", "status")
"""Fields the table's DETAIL column shows, when the event has them."""


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    events = subcommands.add_parser("events", help="a workflow's event log, in order")
    events.add_argument("id", help="workflow id")
    events.add_argument("--after", help="only events after this event id")
    events.add_argument("--limit", type=int, default=100, help="events per page (default: 100)")
    add_target_arguments(events)
    events.set_defaults(handler=cmd_events)


def cmd_events(args: argparse.Namespace) -> int:
    query = given(after=args.after, limit=args.limit)
    page = carry_out(
        args, "list_events", params={"workflow_id": args.id}, query=query, writes=False
    )
    rows = page["items"]
    if args.json:
        for event in rows:
            print(render.dumps(event))
        return 0
    if not rows:
        print("no events")
        return 0
    cells = [[render.timestamp(e["at"]), e["type"], detail(e), e["event_id"]] for e in rows]
    print(render.table(("AT (UTC)", "EVENT", "DETAIL", "EVENT ID"), cells))
    if len(rows) == args.limit:
        print(f"\nmore: weft events {args.id} ... --after '{rows[-1]['event_id']}'")
    return 0


def detail(event: dict[str, Any]) -> str:
    """The event's facts for people: step, attempt, names, and the error if any."""
    parts = [f"{name} {event[name]}" for name in SHOWN if event.get(name) is not None]
    error = event.get("error")
    if isinstance(error, dict) and error:
        parts.append(f"{error.get('type', '')}: {error.get('message', '')}")
    return "; ".join(parts)
