"""The filters ``weft list`` and ``weft count`` share, and ``weft count`` itself (ADR 0030).

``--where NAME OP VALUE`` (repeatable; ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``^=`` for
"starts with"), ``--tag`` (repeatable: every tag must be present), ``--started-after`` and
``--started-before`` (ISO 8601 with a zone, or epoch seconds), ``--id-prefix``,
``--type-prefix``. They become
the query of ``GET /workflows``, carried out through ``calling.carry_out``.
"""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from weft_serverless.cli_commands import render
from weft_serverless.cli_commands.calling import carry_out, given
from weft_serverless.cli_commands.target import UsageError, add_target_arguments
from weft_serverless.search_attributes import parse_condition


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", help="pending, running, suspended, completed, failed, ...")
    parser.add_argument("--type", dest="workflow_type", help="only this workflow type")
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COND",
        help="search attribute condition, e.g. customer=c-7 or 'amount>=100' (repeatable)",
    )
    parser.add_argument(
        "--tag", dest="tags", action="append", default=[], help="only runs with this tag"
    )
    parser.add_argument("--started-after", help="ISO 8601 time with a zone, or epoch seconds")
    parser.add_argument("--started-before", help="ISO 8601 time with a zone, or epoch seconds")
    parser.add_argument("--id-prefix", help="only ids starting with this")
    parser.add_argument("--type-prefix", help="only workflow types starting with this")


def filters_of(args: argparse.Namespace) -> dict[str, Any]:
    """The query fields of ``GET /workflows`` (and ``/workflow-counts``) the command line
    names, as the API takes them: ``where`` a JSON object, ``tags`` comma-separated."""
    where: dict[str, Any] = {}
    for text in args.where:
        name, spec = parse_condition(text)
        if name in where:
            raise UsageError(f"--where names {name!r} twice; give one condition per attribute")
        where[name] = list(spec)
    for tag in args.tags:
        if "," in tag:
            raise UsageError(f"--tag {tag!r}: a tag has no commas; repeat --tag for each tag")
    return given(
        status=args.status,
        workflow_type=args.workflow_type,
        where=json.dumps(where) if where else None,
        tags=",".join(args.tags) or None,
        started_after=_time(args.started_after, "--started-after"),
        started_before=_time(args.started_before, "--started-before"),
        id_prefix=args.id_prefix,
        type_prefix=args.type_prefix,
    )


def _time(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} takes an ISO 8601 time or epoch seconds, not {text!r}") from None
    if moment.tzinfo is None:
        raise UsageError(f"{flag} needs a zone, e.g. {text}+00:00")
    return moment.timestamp()


def add(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    count = subcommands.add_parser(
        "count", help="count workflows per status, type or search attribute"
    )
    count.add_argument(
        "--group-by",
        default="status",
        help="status (default), workflow_type, or a search attribute name",
    )
    add_filter_arguments(count)
    add_target_arguments(count)
    count.set_defaults(handler=cmd_count)


def cmd_count(args: argparse.Namespace) -> int:
    query = {"group_by": args.group_by, **filters_of(args)}
    answer = carry_out(args, "count_workflows", query=query, writes=False)
    ordered = [(group["value"], group["count"]) for group in answer["counts"]]
    if args.json:
        print(render.dumps({"group_by": args.group_by, "counts": [list(p) for p in ordered]}))
        return 0
    if not ordered:
        print("no workflows")
        return 0
    print(render.table((args.group_by.upper(), "COUNT"), [[str(k), str(n)] for k, n in ordered]))
    return 0
