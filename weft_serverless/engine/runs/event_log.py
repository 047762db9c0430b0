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
record of its own (``retry_history``), holding the failure and the step records it set
aside: their events keep the ids they had, and records written after a retry carry the
run's retry count, which their ids carry too.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.engine.config import MAX_PAGE, check_id
from weft_serverless.engine.persistence.records import (
    TERMINAL,
    History,
    WorkflowState,
    load_history,
)
from weft_serverless.engine.persistence.retry_history import retries_of
from weft_serverless.engine.persistence.stored_records import AttemptRecord, OpRecord, UpdateRecord
from weft_serverless.errors import InvalidArgumentError, WorkflowNotFoundError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage

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
    state: WorkflowState, slot: str, activity: str, failure: AttemptRecord
) -> dict[str, Any]:
    """The event of a failed activity attempt that will be retried (a retry record)."""
    event = _base(
        state,
        float(failure.at),
        slot,
        "a" + keys.counter(failure.number, 4),
        "activity.attempt_failed",
    )
    event.update(
        step=keys.describe_slot(slot),
        activity=activity,
        attempt=failure.number,
        error=_error(failure.error_type, failure.message, failure.traceback),
    )
    if failure.due is not None:
        event["retry_at"] = failure.due
    return event


def _error(error_type: str, message: str, traceback: str | None) -> dict[str, Any]:
    """An event's error: type and message, and the traceback when one was kept."""
    error = {"type": error_type, "message": message}
    if traceback:
        error["traceback"] = traceback
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
        for attempt in attempts:
            activity = str(attempt.signature or "run:")[len("run:") :]
            events.append(attempt_failed_event(state, slot, activity, attempt))
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
                events.append(_step_event(history, sub, OpRecord.from_map(op), set_aside=True))
    for slot, updates in history.updates_applied.items():
        for seq, raw in enumerate(updates):
            update = UpdateRecord.from_bytes(raw)
            at = float(update.at or state.created_at)
            event = _base(state, at, slot, "b" + keys.counter(seq, 4), "update.applied")
            event.update(name=update.name, update_id=update.update_id)
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


def read(storage: Storage, workflow_id: str, after: str | None, limit: int) -> list[dict[str, Any]]:
    """``Engine.events``: one page of a stored run's log, arguments checked first; it costs
    one range read of the run's partition, whatever the page."""
    workflow_id = check_id(workflow_id)
    if after is not None and (not isinstance(after, str) or not after):
        raise InvalidArgumentError("after must be an event id returned by events()", "after")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an integer from 1 to {MAX_PAGE}", "limit")
    history = load_history(storage, workflow_id)
    if history is None:
        raise WorkflowNotFoundError(workflow_id)
    return page(events_of(history), after, limit)


def _base(state: WorkflowState, at: float, slot: str, kind: str, type_: str) -> dict[str, Any]:
    return {
        "event_id": event_id(at, slot, kind, state.created_at),
        "type": type_,
        "workflow_id": state.id,
        "workflow_type": state.type,
        "at": at,
    }


def _step_event(
    history: History, slot: str, record: OpRecord, *, set_aside: bool = False
) -> dict[str, Any]:
    """A committed step: what kind of step its signature names, and how it ended
    (``set_aside``: a record a retry set aside, whose slot's records are another round's)."""
    state, signature = history.state, record.signature
    at = float(record.at or state.created_at)
    ok = record.ok
    if signature == "sleep":
        type_ = "timer.fired"
    elif signature.startswith("signal:"):
        type_ = "signal.received" if record.has_value else "signal.timed_out"
    elif signature.startswith("child:"):
        type_ = "child.completed" if ok else "child.failed"
    else:
        type_ = "step.completed" if ok else "step.failed"
    event = _base(state, at, slot, _round("c", record.retries), type_)
    event.update(step=keys.describe_slot(slot), operation=signature)
    if record.attempt is not None:
        event["attempt"] = record.attempt
    if not ok:
        err = record.error or {}
        event["error"] = _error(err.get("type", ""), err.get("message", ""), err.get("tb"))
        if err.get("attempts") is not None:
            event["attempt"] = err["attempts"]
    pending = None if set_aside else history.pending.get(slot)
    child = None if pending is None else pending.child_id
    if child is not None:
        event["child_id"] = child
    return event
