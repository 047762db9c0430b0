"""A scheduled reminder: sleep until it is due, remind, repeat until acknowledged.

What it shows: a durable timer far in the future (``ctx.sleep`` until ``due_at``, or for
``delay``) that costs nothing while it waits, because it is a stored timer the maintenance
schedule fires, not a sleeping process; ``ctx.now()`` recorded once so replay computes the
same wait; repeats spaced by a ``wait_for_signal`` with a timeout, so an "acknowledge" signal
ends the series early. ``ctx.on_query("status")`` tells how many reminders went out.

Input: ``to``, ``message``, ``reminder_id``, and either ``due_at`` (epoch seconds or an ISO
8601 time with a zone) or ``delay`` (a duration such as ``"30s"``, ``"2h"``), plus
``repeat`` (default 1) and ``every`` (default ``"1d"``) between repeats.

Try it under ``weft dev`` (the port is printed at startup)::

    curl -s -X POST localhost:8080/workflows -H 'content-type: application/json' \\
      -d '{"workflow_type": "reminder", "id": "rem-1", "input": {"reminder_id": "rem-1",
           "to": "ada@example.com", "message": "renew the domain", "delay": "5s",
           "repeat": 3, "every": "10s"}}'
    curl -s -X POST localhost:8080/workflows/rem-1/queries/status
    # after the first reminder, stop the repeats:
    curl -s -X POST localhost:8080/workflows/rem-1/signals/acknowledge \\
      -H 'content-type: application/json' -d '{"payload": {"by": "ada"}}'
    curl -s localhost:8080/workflows/rem-1/result
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator
from typing import Any

from weft_serverless import InvalidArgumentError, WorkflowContext, workflow

ACKNOWLEDGE = "acknowledge"
DEFAULT_EVERY = "1d"


def send_reminder(reminder: dict[str, Any]) -> dict[str, Any]:
    """Send reminder number ``n``; the message id is derived, so a repeat sends it once."""
    print(f"  [reminder]  #{reminder['n']} to {reminder['to']}: {reminder['message']}")
    return {"message_id": f"{reminder['reminder_id']}-{reminder['n']}"}


def _due_time(request: dict[str, Any]) -> float | None:
    """``due_at`` as epoch seconds, or None when the input uses ``delay`` instead."""
    due = request.get("due_at")
    if due is None:
        return None
    if isinstance(due, int | float) and not isinstance(due, bool):
        return float(due)
    if isinstance(due, str):
        parsed = dt.datetime.fromisoformat(due)
        if parsed.tzinfo is not None:
            return parsed.timestamp()
    raise InvalidArgumentError("due_at must be epoch seconds or an ISO 8601 time with a zone")


def reminder(ctx: WorkflowContext, request: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    """Wait until due, then send up to ``repeat`` reminders until one is acknowledged."""
    state: dict[str, Any] = {"stage": "scheduled", "sent": 0, "acknowledged_by": None}
    ctx.on_query("status", lambda _: dict(state))

    due = _due_time(request)
    if due is None:
        yield ctx.sleep(request.get("delay", 0))
    else:
        now = yield ctx.now()
        yield ctx.sleep(max(0.0, due - now))
    state["stage"] = "reminding"

    repeat = max(1, int(request.get("repeat", 1)))
    for number in range(1, repeat + 1):
        yield ctx.run(
            send_reminder,
            {
                "reminder_id": request["reminder_id"],
                "n": number,
                "to": request["to"],
                "message": request["message"],
            },
        )
        state["sent"] = number
        if number == repeat:
            break
        ack = yield ctx.wait_for_signal(ACKNOWLEDGE, timeout=request.get("every", DEFAULT_EVERY))
        if ack is not None:
            state["acknowledged_by"] = (
                ack.get("by", "someone") if isinstance(ack, dict) else "someone"
            )
            break
    state["stage"] = "done"
    return {"reminder_id": request["reminder_id"], **state}


reminder_workflow = (
    workflow("reminder", version="1").activities(send_reminder=send_reminder).execute(reminder)
)

workflows = {"reminder": reminder_workflow}

SAMPLE_INPUT: dict[str, Any] = {
    "reminder_id": "rem-1",
    "to": "ada@example.com",
    "message": "renew the domain",
    "delay": "5s",
    "repeat": 3,
    "every": "10s",
}
