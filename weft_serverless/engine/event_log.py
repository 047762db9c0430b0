"""A run's event log: its stored records read back as ordered, typed events.

No step writes an event record: every fact an event reports is already stored, in the batch
that made it happen (the state's ``created_at`` and terminal ``updated_at``, each op record's
``at``, retry records, applied updates), so the log costs nothing per step (ADR 0032) and is
exactly as durable as what it reports. Event ids are derived from the record (its time, slot
and family, and the run's start time), so they are the same on every read and sort in event
order: ``after=`` pages by comparing ids, with no cursor stored anywhere.

What the records do not keep, the log does not invent: a consumed signal's delivery time and
a child's start time are not stored (the step that received or awaited them is), status
changes that are not terminal (suspend, resume) leave only the current state, and a step's
retry records beyond the newest ``ATTEMPT_HISTORY`` are gone. A retry of a failed run is a
record of its own (``attempt_history``), holding the failure and the step records it set
aside: their events keep the ids they had, and records written after a retry carry the
run's retry count, which their ids carry too.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.codec import decode
from weft_serverless.storage import keys

from .attempt_history import retries_of
from .records import TERMINAL, History, WorkflowState

STARTED_SLOT = "!"  # sorts before every step slot at one instant
END_SLOT = "~"  # and this after every one


def event_id(at: float, slot: str, kind: str, created_at: float) -> str:
    """``{at ms}-{slot}-{kind}-{run start ms, hex}``: text order is event order."""
    return f"{keys.ms(at):016d}-{slot}-{kind}-{keys.ms(created_at):x}"


def terminal_event(state: WorkflowState) -> dict[str, Any]:
    """The event of a run's terminal state (the outbox writes the same one)."""
    return _terminal(state, state.status, state.updated_at, state.error, retries_of(state))


def _terminal(
    state: WorkflowState, status: str, at: float, error: dict[str, Any] | None, retries: int
) -> dict[str, Any]:
    """A terminal event, of the run now or of a failure a later retry ran again."""
    event = _base(state, at, END_SLOT, _round("t", retries), f"run.{status}")
    event["status"] = status
    if error:
        event["error"] = {"type": error.get("type", ""), "message": error.get("message", "")}
    return event


def retried_event(state: WorkflowState, slot: str, record: dict[str, Any]) -> dict[str, Any]:
    """The event of a retry of a failed run (its retry record): which step runs again."""
    k = int(record["k"])
    # "R" sorts before the kinds of the step's own records in the same millisecond
    event = _base(state, float(record["at"]), slot, "R" + keys.counter(k, 4), "run.retried")
    event.update(step=keys.describe_slot(slot), retry=k)
    if record.get("error"):
        error = record["error"]
        event["error"] = {"type": error.get("type", ""), "message": error.get("message", "")}
    return event


def _round(kind: str, retries: Any) -> str:
    """An event kind, told apart by the run's retry count when there was a retry."""
    return kind + keys.counter(int(retries), 4) if retries else kind


def attempt_failed_event(
    state: WorkflowState, slot: str, activity: str, failure: dict[str, Any]
) -> dict[str, Any]:
    """The event of a failed activity attempt that will be retried (a retry record)."""
    event = _base(
        state,
        float(failure["at"]),
        slot,
        "a" + keys.counter(int(failure["n"]), 4),
        "activity.attempt_failed",
    )
    event.update(
        step=keys.describe_slot(slot),
        activity=activity,
        attempt=int(failure["n"]),
        error=_error(failure),
    )
    if failure.get("due") is not None:
        event["retry_at"] = failure["due"]
    return event


def _error(record: dict[str, Any]) -> dict[str, Any]:
    """An event's error: type and message, and the traceback when one was kept."""
    error = {"type": record.get("type", ""), "message": record.get("message", "")}
    if record.get("tb"):
        error["traceback"] = record["tb"]
    return error


def dead_letter_event(
    workflow_type: str, created_at: float, position: int, letter: dict[str, Any]
) -> dict[str, Any]:
    """The event of a finalizer that exhausted its retries (its dead letter)."""
    at = float(letter["at"])
    event = {
        "event_id": event_id(at, END_SLOT, "f" + keys.counter(position, 4), created_at),
        "type": "finalizer.dead_lettered",
        "workflow_id": letter["workflow_id"],
        "workflow_type": workflow_type,
        "at": at,
        "activity": letter.get("activity"),
        "attempts": letter.get("attempts"),
        "error": letter.get("error"),
    }
    return event


def events_of(history: History) -> list[dict[str, Any]]:
    """Every event the run's records hold, in event order."""
    state = history.state
    events = [_base(state, state.created_at, STARTED_SLOT, "s", "run.started")]
    for slot, attempts in history.attempts.items():
        for record in attempts:
            activity = str(record.get("sig", "run:"))[len("run:") :]
            events.append(attempt_failed_event(state, slot, activity, record))
    for slot, record in history.ops.items():
        events.append(_step_event(history, slot, record))
    for slot, retries in history.retries.items():
        for retry in retries:
            events.append(retried_event(state, slot, retry))
            before = int(retry["k"]) - 1
            failure = (retry.get("failed_at"), retry.get("error"))
            if failure[0] is not None:
                events.append(_terminal(state, "failed", float(failure[0]), failure[1], before))
            for sub, op in retry.get("ops", {}).items():
                events.append(_step_event(history, sub, op, set_aside=True))
    for slot, updates in history.updates_applied.items():
        for seq, raw in enumerate(updates):
            record = decode(raw)
            at = float(record.get("at") or state.created_at)
            event = _base(state, at, slot, "b" + keys.counter(seq, 4), "update.applied")
            event.update(name=record.get("name"), update_id=record.get("id"))
            events.append(event)
    if state.status in TERMINAL:
        events.append(terminal_event(state))
    events.sort(key=lambda event: str(event["event_id"]))
    return events


def page(events: list[dict[str, Any]], after: str | None, limit: int) -> list[dict[str, Any]]:
    """The events after the one whose id is ``after`` (any id: ids compare as text)."""
    if after is not None:
        events = [event for event in events if str(event["event_id"]) > after]
    return events[:limit]


def _base(state: WorkflowState, at: float, slot: str, kind: str, type_: str) -> dict[str, Any]:
    return {
        "event_id": event_id(at, slot, kind, state.created_at),
        "type": type_,
        "workflow_id": state.id,
        "workflow_type": state.type,
        "at": at,
    }


def _step_event(
    history: History, slot: str, record: dict[str, Any], *, set_aside: bool = False
) -> dict[str, Any]:
    """A committed step: what kind of step its signature names, and how it ended
    (``set_aside``: a record a retry set aside, whose slot's records are another round's)."""
    state, signature = history.state, str(record.get("sig", ""))
    at = float(record.get("at") or state.created_at)
    ok = record.get("ok", True) is not False
    if signature == "sleep":
        type_ = "timer.fired"
    elif signature.startswith("signal:"):
        type_ = "signal.received" if "v" in record else "signal.timed_out"
    elif signature.startswith("child:"):
        type_ = "child.completed" if ok else "child.failed"
    else:
        type_ = "step.completed" if ok else "step.failed"
    event = _base(state, at, slot, _round("c", record.get("r")), type_)
    event.update(step=keys.describe_slot(slot), operation=signature)
    if "a" in record:
        event["attempt"] = record["a"]
    if not ok:
        err = record.get("err") or {}
        event["error"] = _error(err)
        if err.get("attempts") is not None:
            event["attempt"] = err["attempts"]
    child = None if set_aside else history.pending.get(slot, {}).get("child_id")
    if child is not None:
        event["child_id"] = child
    return event
