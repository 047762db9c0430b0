"""Turning stored workflow records into terminal tables and into JSON for scripts.

The step timeline reads a workflow's partition once (``load_history``) and joins, per step
slot, its op record (signature, outcome, attempt number) with what is still pending there
(a timer, a retry, an async activity, a child). Times are the ones the engine stores: when a
step committed, and when a timer or retry falls due.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weft_serverless.codec import jsonable

if TYPE_CHECKING:
    from weft_serverless.engine.records import History

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
    """Left-aligned columns sized to their widest cell; the last column is never padded."""
    text_rows = [[_cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in text_rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    lines = []
    for row in [list(headers), *text_rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + row[-1:]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    text = "-" if value is None or value == "" else str(value)
    indent = text[: len(text) - len(text.lstrip(" "))]
    text = indent + " ".join(text.split())
    return text if len(text) <= ELLIPSIS_AT else text[: ELLIPSIS_AT - 1] + "…"


@dataclass(slots=True)
class Step:
    """One row of the timeline: a step slot and what the store knows about it."""

    slot: str
    step: str
    operation: str
    status: str
    attempts: int | None = None
    due_at: float | None = None
    detail: str = ""
    error: dict[str, Any] | None = None
    committed_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "step": self.step,
            "operation": self.operation,
            "status": self.status,
            "attempts": self.attempts,
            "due_at": self.due_at,
            "committed_at": self.committed_at,
            "detail": self.detail or None,
            "error": self.error,
        }


# The first letter of a timer's tag says what parked there (see the engine's park calls).
TIMER_KINDS = {"s": "sleep", "w": "signal wait (timeout)", "u": "condition (timeout)"}


def timeline(history: History) -> list[Step]:
    """Every committed step, then what is parked, in slot order (branches under parents)."""
    from weft_serverless.storage import keys

    steps: dict[str, Step] = {}
    for slot, record in history.ops.items():
        steps[slot] = _committed(slot, record, history, keys.describe_slot(slot))
    for raw_slot, record in history.pending.items():
        slot, _, attempt = raw_slot.partition("@")
        if slot in steps:
            continue
        operation = str(record.get("sig", "-"))  # parked steps with a record keep their signature
        step = Step(slot, keys.describe_slot(slot), operation, "waiting", due_at=record.get("due"))
        if attempt:
            step.operation, step.attempts = _activity_signature(history, slot), int(attempt)
            step.detail = "async activity: waiting for complete/fail"
        elif "child_id" in record:
            step.operation, step.detail = "child", f"waiting for child {record['child_id']}"
        elif record.get("timer"):
            tag = str(record["timer"][1]).rsplit("#", 1)[-1]
            step.detail = TIMER_KINDS.get(tag[:1], "timer")
        steps[slot] = step
    for slot, attempts in history.attempts.items():
        if slot in steps or not attempts:
            continue
        last = attempts[-1]
        failed = int(last.get("n", len(attempts)))
        steps[slot] = Step(
            slot,
            keys.describe_slot(slot),
            str(last.get("sig") or "run"),
            "retrying",
            attempts=failed,
            due_at=last.get("due"),
            detail=f"attempt {failed} failed: {last.get('type')}: {last.get('message')}; "
            f"attempt {failed + 1} is due then",
        )
    for step in steps.values():
        if step.status in ("waiting", "retrying"):
            _settle(step, history)
    _add_parked_parents(steps, history)
    return [steps[slot] for slot in sorted(steps)]


def _activity_signature(history: History, slot: str) -> str:
    """``run:<activity>`` of a step parked on an async attempt, when a record names it."""
    for record in history.attempts.get(slot, [])[::-1]:
        if record.get("sig"):
            return str(record["sig"])
    return "run"


def _settle(step: Step, history: History) -> None:
    """A parked record that no longer waits: its race or all already ended, or the run did."""
    parts = step.slot.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        parent = history.ops.get(".".join(parts[:depth]))
        if parent is None:
            continue
        if str(parent.get("sig", "")).startswith("race("):
            step.status, step.detail = "lost", f"branch {int(parent.get('i', 0)) + 1} won"
        else:
            step.status, step.detail = "abandoned", "its all() failed first"
        step.due_at = None
        return
    status = history.state.status
    if status not in ("running", "suspended", "pending"):
        step.status = "cancelled" if status in ("cancelled", "timed-out") else "abandoned"
        step.detail = f"the run was {status} while it waited"
        step.due_at = None


def _add_parked_parents(steps: dict[str, Step], history: History) -> None:
    """Rows for the step a running workflow is parked at, when nothing else shows it."""
    from weft_serverless.storage import keys

    for slot in list(steps):
        top = slot.split(".", 1)[0]
        if top not in steps:
            steps[top] = Step(top, keys.describe_slot(top), "all/race", "waiting")
            steps[top].detail = "parked: branches below"
            _settle(steps[top], history)
    if history.state.status not in ("running", "suspended"):
        return
    tops = [keys.counter_value(slot) for slot in steps if "." not in slot]
    done = [keys.counter_value(slot) for slot in history.ops if "." not in slot]
    parked_step = max(done) + 1 if done else 0
    parked = keys.step_slot(parked_step)
    if not tops or max(tops) < parked_step:
        step = Step(parked, keys.describe_slot(parked), "-", "waiting")
        started = sorted(key for key in history.started if key.split("#", 1)[0] == parked)
        if started:
            attempt = keys.counter_value(started[-1].split("#", 1)[1])
            step.status, step.attempts = "unknown", attempt
            step.detail = f"attempt {attempt} started; its outcome is not recorded (a crash?)"
        else:
            # Nothing is stored for this step yet: what it is lives only in the code.
            step.detail = (
                "nothing recorded yet: a step not started (e.g. an activity not run yet) or "
                "a wait with no timeout (signal or condition)"
            )
        steps[parked] = step


def _committed(slot: str, record: dict[str, Any], history: History, label: str) -> Step:
    signature = str(record.get("sig", "?"))
    failed_attempts = history.attempts.get(slot, [])
    failed_before = (
        int(failed_attempts[-1].get("n", len(failed_attempts))) if failed_attempts else 0
    )
    attempts: int | None = record.get("a")
    if attempts is None and signature.startswith("run:"):
        err = record.get("err") or {}
        attempts = err.get("attempts") or failed_before + 1
    pending = history.pending.get(slot) or {}
    step = Step(slot, label, signature, "ok", attempts=attempts, due_at=pending.get("due"))
    step.committed_at = record.get("at")
    if record.get("ok", True) is False:
        step.status = "failed"
        step.error = record.get("err")
        err = step.error or {}
        step.detail = f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")
    elif signature.startswith("signal:"):
        step.detail = "received" if "v" in record else "timed out"
        if "v" in record:
            step.due_at = None  # the deadline did not matter
    elif signature.startswith("race("):
        step.detail = f"branch {int(record.get('i', 0)) + 1} won"
    elif failed_attempts:
        step.detail = f"{failed_before} failed attempt(s) before"
    if step.due_at is not None and not step.detail:
        step.detail = "timer fired"
    return step


def failure_rows(failures: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Rows of the failed-attempts table (see ``records.failed_attempts``)."""
    return [
        [
            failure["step"],
            failure["activity"],
            failure["attempt"],
            timestamp(failure["failed_at"]),
            f"{failure['error_type']}: {failure['message']}",
        ]
        for failure in failures
    ]


FAILURE_HEADERS = ("STEP", "ACTIVITY", "ATTEMPT", "FAILED (UTC)", "ERROR")


def step_rows(steps: Sequence[Step]) -> list[list[Any]]:
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
