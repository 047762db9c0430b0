"""Turning stored workflow records into terminal tables and into JSON for scripts.

The rows come from the engine's read model (``weft_serverless.read_history``): decoded steps,
attempts and owners, so nothing here knows how the store encodes them.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from weft_serverless import jsonable

if TYPE_CHECKING:
    from weft_serverless import TimelineStep

ELLIPSIS_AT = 80


def dumps(value: Any, *, pretty: bool = False) -> str:
    return json.dumps(jsonable(value), indent=2 if pretty else None, sort_keys=pretty)


def timestamp(seconds: float | None) -> str:
    """Epoch seconds as UTC ``2026-01-01 10:00:03Z``; '-' when unknown."""
    if seconds is None:
        return "-"
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + "Z"


def relative(seconds: float | None, now: float | None = None) -> str:
    """``in 4m 10s`` / ``12s ago``, for due times an operator is waiting on."""
    if seconds is None:
        return ""
    delta = seconds - (time.time() if now is None else now)
    span = abs(delta)
    if span < 60:
        text = f"{span:.0f}s"
    elif span < 3600:
        text = f"{int(span // 60)}m {int(span % 60)}s"
    elif span < 86400:
        text = f"{int(span // 3600)}h {int(span % 3600 // 60)}m"
    else:
        text = f"{int(span // 86400)}d {int(span % 86400 // 3600)}h"
    return f"in {text}" if delta >= 0 else f"{text} ago"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns sized to their widest cell. The last column is never padded nor
    cut: its width moves no other cell, and it carries what an operator reads in full (a
    step's detail with its heartbeat, an error message)."""
    text_rows = [
        [_cell(value, whole=index == len(row) - 1) for index, value in enumerate(row)]
        for row in rows
    ]
    widths = [len(header) for header in headers]
    for row in text_rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    lines = []
    for row in [list(headers), *text_rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + row[-1:]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cell(value: Any, *, whole: bool = False) -> str:
    """One line of text for a cell, cut at ``ELLIPSIS_AT`` unless ``whole``."""
    text = "-" if value is None or value == "" else str(value)
    indent = text[: len(text) - len(text.lstrip(" "))]
    text = indent + " ".join(text.split())
    return text if whole or len(text) <= ELLIPSIS_AT else text[: ELLIPSIS_AT - 1] + "…"


def failure_rows(failures: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Rows of the failed-attempts table (see ``WorkflowHistory.failed_attempts``)."""
    return [
        [
            failure["step"],
            failure["activity"],
            _attempt(failure),
            timestamp(failure["failed_at"]),
            f"{failure['error_type']}: {failure['message']}",
        ]
        for failure in failures
    ]


def _attempt(failure: dict[str, Any]) -> str:
    """The attempt's number, and the retry of the run it came after, if any."""
    after = failure.get("after_retries") or 0
    return f"{failure['attempt']}" + (f" (after retry {after})" if after else "")


def tracebacks(failures: Sequence[dict[str, Any]]) -> str:
    """The kept traceback of each failed attempt that has one, indented under its name."""
    blocks = []
    for failure in failures:
        text = failure.get("traceback")
        if text:
            lines = "\n".join("  " + line for line in str(text).rstrip("\n").splitlines())
            blocks.append(f"step {failure['step']}, attempt {_attempt(failure)}:\n{lines}")
    return "\n\n".join(blocks)


FAILURE_HEADERS = ("STEP", "ACTIVITY", "ATTEMPT", "FAILED (UTC)", "ERROR")


def step_rows(steps: Sequence[TimelineStep]) -> list[list[Any]]:
    """Timeline rows for ``table``: branches indented under their parent step."""
    rows = []
    for step in steps:
        indent = "  " * step.slot.count(".")
        due = ""
        if step.due_at is not None:
            due = f"{timestamp(step.due_at)} ({relative(step.due_at)})"
        rows.append(
            [
                indent + step.step,
                indent + step.operation,
                step.status,
                step.attempts,
                due,
                step.detail,
            ]
        )
    return rows


STEP_HEADERS = ("STEP", "OPERATION", "STATUS", "ATTEMPTS", "DUE (UTC)", "DETAIL")
