"""``weft dev``: run moto, the API handler over HTTP and a maintenance ticker locally."""

from __future__ import annotations

import argparse

from weft_serverless.cli_commands.target import UsageError


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``weft dev``."""
    dev = subcommands.add_parser(
        "dev",
        help="serve the API and maintenance handlers locally on moto's DynamoDB",
        description=(
            "Start moto's DynamoDB server on loopback, create the table, serve the API "
            "handler over HTTP (each request becomes an API Gateway event) and call the "
            "maintenance handler on a ticker. Everything is in memory; Ctrl-C stops it."
        ),
    )
    dev.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    dev.add_argument("--port", type=int, default=8080, help="port, 0 for any free one (8080)")
    dev.add_argument(
        "--workflows",
        default="examples.workflows",
        metavar="MODULE",
        help="module exporting a 'workflows' dict (default: examples.workflows)",
    )
    dev.add_argument(
        "--tick", type=float, default=1.0, metavar="SECONDS", help="maintenance interval (1)"
    )
    dev.add_argument("--table", default="weft-dev", help="table name in moto (weft-dev)")
    dev.add_argument(
        "--shards",
        default="",
        metavar="COUNTS",
        help="shard counts the table is created with: 8 (every index) or timers=16,claims=16 "
        "(the rest 4); default: 4 each",
    )
    dev.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print the handlers' JSON logs and EMF metrics, as Lambda would",
    )
    dev.set_defaults(handler=cmd_dev)


def cmd_dev(args: argparse.Namespace) -> int:
    if args.tick <= 0:
        raise UsageError("--tick must be > 0 seconds")
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be 0..65535")
    if args.shards:
        from weft_serverless.errors import ConfigurationError
        from weft_serverless.storage.shard_layout import parse_shards

        try:
            parse_shards(args.shards)
        except ConfigurationError as exc:
            raise UsageError(f"--shards: {exc}") from None
    from weft_serverless.devserver import DevConfig, run

    config = DevConfig(
        host=args.host,
        port=args.port,
        workflows=args.workflows,
        tick=args.tick,
        table=args.table,
        verbose=args.verbose,
        shards=args.shards,
    )
    return run(config)
