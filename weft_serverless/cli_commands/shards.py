"""``weft shards show|change``: a store's shard counts, and changing them on a live store.

``show`` prints the store's ``meta/shards`` marker: its counts and, while they change, the
counts it moves to and the phase. ``change`` runs the procedure of ADR 0050 from this
process, phase by phase, sleeping between phases (``--no-wait``: one step, then report);
interrupted, it is run again with the same counts (or none) and carries on from the marker.
``--refresh`` must be at least the engines' ``shards_refresh`` (60 s unless set), and
``--longest-invocation`` at least the longest invocation of any engine on the store.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from weft_serverless.cli_commands.target import add_target_arguments, open_storage

INDEX_FLAGS = ("timers", "status", "claims", "visibility", "outbox")


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``weft shards`` and its subcommands."""
    shards = subcommands.add_parser("shards", help="a store's shard counts, and changing them")
    actions = shards.add_subparsers(title="shards commands", metavar="ACTION")

    show = actions.add_parser("show", help="the store's counts, and a change under way")
    add_target_arguments(show)
    show.set_defaults(handler=cmd_show)

    change = actions.add_parser(
        "change", help="change the counts of a live store (resumable: run it again)"
    )
    for name in INDEX_FLAGS:
        change.add_argument(f"--{name}", type=int, metavar="N", help=f"new count of {name}")
    change.add_argument(
        "--refresh",
        type=float,
        default=60.0,
        help="seconds the engines keep their copy of the counts (their shards_refresh; 60)",
    )
    change.add_argument(
        "--longest-invocation",
        type=float,
        default=900.0,
        help="seconds of the longest invocation of any engine on the store (900)",
    )
    change.add_argument(
        "--no-wait", action="store_true", help="do what is due now, report, and stop"
    )
    add_target_arguments(change)
    change.set_defaults(handler=cmd_change)


def cmd_show(args: argparse.Namespace) -> int:
    from weft_serverless.storage import shard_layout, shard_migration

    storage = open_storage(args)
    try:
        report = shard_migration.show(storage)
        marker = shard_layout.read_marker(storage) is not None
    finally:
        storage.close()
    _print(args, report, marker=marker)
    return 0


def cmd_change(args: argparse.Namespace) -> int:
    from weft_serverless import WORKFLOW_STATUSES
    from weft_serverless.storage import shard_layout, shard_migration

    requested = {name: getattr(args, name) for name in INDEX_FLAGS}
    counts = {name: value for name, value in requested.items() if value is not None}
    settle = shard_layout.check_refresh(args.refresh) + shard_migration.check_settle(
        args.longest_invocation
    )
    storage = open_storage(args)
    try:
        layout = shard_migration.stored_layout(storage)
        target = shard_migration.target_counts(layout, counts or None)
        while True:
            now = time.time()
            change = shard_migration.advance(storage, target, now, settle, WORKFLOW_STATUSES)
            _print(args, change, marker=True)
            if change.done or args.no_wait or change.next_at is None:
                return 0
            time.sleep(max(0.0, change.next_at - now))
    finally:
        storage.close()


def _print(args: argparse.Namespace, change: Any, *, marker: bool) -> None:
    body = {
        "phase": change.phase,
        "counts": change.counts,
        "pending": change.pending,
        "next_at": change.next_at,
        "moved": change.moved,
        "waiting_on": change.waiting_on,
        "marker": marker,
    }
    if args.json:
        print(json.dumps(body, sort_keys=True))
        return
    counts = ", ".join(f"{name}={count}" for name, count in change.counts.items())
    line = f"{change.phase}: {counts}"
    if change.pending is not None:
        pending = ", ".join(f"{name}={count}" for name, count in change.pending.items())
        line += f" -> {pending}"
        if change.next_at is not None:
            line += f" (next phase at {change.next_at:.0f})"
    if change.moved:
        line += f"; moved {change.moved} item(s)"
    if change.waiting_on:
        line += f"; waiting for {change.waiting_on} to empty"
    print(line, file=sys.stdout, flush=True)
