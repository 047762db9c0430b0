"""``weft console``: serve the operator console on a store the other commands reach."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from weft_serverless.cli_commands.target import (
    UsageError,
    add_target_arguments,
    load_workflows,
    operator_engine,
)

DEFAULT_PORT = 8484


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``weft console``."""
    console = subcommands.add_parser(
        "console",
        help="a web console to find, read and control runs and schedules",
        description=(
            "Serve the operator console on loopback for the store named by --db or --table: "
            "runs with filters and counts, each run's timeline, signals, updates, cancel, "
            "suspend, resume, retry and purge, and schedules. Nothing is deployed; it acts "
            "with your own credentials. Needs the console extra: from a checkout, "
            "pip install -e '.[console]'. Run it where --workflows imports from (the "
            "checkout's root for examples.workflows)."
        ),
    )
    console.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    console.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port, 0 for any free one ({DEFAULT_PORT})"
    )
    console.add_argument(
        "--workflows",
        metavar="MODULE",
        help=(
            "module with a 'workflows' dict: queries and updates answer, and a signalled or "
            "resumed run is driven here; without it writes are stored for the run's owner "
            "or the next maintenance pass"
        ),
    )
    console.add_argument("--read-only", action="store_true", help="hide and refuse every action")
    console.add_argument(
        "--refresh", type=float, default=2.0, metavar="SECONDS", help="live refresh interval (2)"
    )
    add_target_arguments(console)
    console.set_defaults(handler=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be 0..65535")
    if args.refresh <= 0:
        raise UsageError("--refresh must be > 0 seconds")
    if args.read_only and args.workflows:
        raise UsageError("--read-only drives nothing; drop --workflows")
    try:
        from weft_serverless.console.app import Console, create_app
        from weft_serverless.console.server import bind, serve
    except ImportError as exc:
        from weft_serverless.errors import ConfigurationError
        from weft_serverless.hints import install_extra

        raise ConfigurationError(
            f"weft console needs the console extra ({exc.name} is missing): "
            f"{install_extra('console')}"
        ) from None
    from weft_serverless.loopback import LOOPBACK_NAMES

    workflows = load_workflows(args.workflows) if args.workflows else None
    samples = _samples(args.workflows) if args.workflows else {}
    with operator_engine(args, writes=not args.read_only, workflows=workflows) as engine:
        console = Console(
            engine=engine,
            target=target_label(args),
            read_only=bool(args.read_only),
            drives=workflows is not None,
            refresh_seconds=float(args.refresh),
            samples=samples,
            allowed_hosts=LOOPBACK_NAMES if args.host in LOOPBACK_NAMES else None,
        )
        server = bind(create_app(console), args.host, args.port)

        def ready(url: str) -> None:
            mode = "read-only" if args.read_only else "read-write"
            print(f"weft console ({mode}) on {console.target}: open {url}  (Ctrl-C stops it)")
            if console.allowed_hosts is None:
                print("  WARNING: not bound to loopback; the console has no authentication")
            sys.stdout.flush()

        with contextlib.suppress(KeyboardInterrupt):
            serve(server, ready)
    return 0


def _samples(module_name: str) -> dict[str, Any]:
    """The module's ``SAMPLES`` (an input per workflow type), which fills the start form."""
    import importlib

    samples = getattr(importlib.import_module(module_name), "SAMPLES", None)
    return dict(samples) if isinstance(samples, dict) else {}


def target_label(args: Any) -> str:
    """What the console looks at, shown in its header."""
    if args.db:
        return f"SQLite file {args.db}"
    import os

    from weft_serverless.storage.dynamodb_schema import ENDPOINT_URL_ENV, TABLE_NAME_ENV

    table = args.table or os.environ.get(TABLE_NAME_ENV, "")
    endpoint = args.endpoint_url or os.environ.get(ENDPOINT_URL_ENV)
    return f"DynamoDB table {table}" + (f" at {endpoint}" if endpoint else "")
