"""What a retry of a failed run keeps of the failure it retries (ADR 0044).

``Engine.retry`` runs the failed step again, so its op records must go (replay would answer
the step with its failure). They go into a retry record (``retry#{slot}#{k}``, the run's k-th
retry, at the retried step's slot) written in the retry's batch with the run's failure: the
failed step's records without their values, and per slot the number of its last attempt.
The step's retry records (``att#``) stay where they are. The step then starts afresh (a new
retry budget, a new ``schedule_to_close``) while its attempts go on being numbered after the
last one, so every attempt keeps its own number, its record and its event id.

Records written after a retry carry ``r``, the run's retry count then, which keeps their
event ids apart from those of the records the retry set aside (ids are derived from times,
and a retry may land in the millisecond of the failure it retries).
"""

from __future__ import annotations

from typing import Any

from weft_serverless.engine.persistence.records import History, WorkflowState
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.storage import keys

RETRIES_FIELD = "retries"
"""The run's state counts the retries made of it (absent: none)."""


def retries_of(state: WorkflowState) -> int:
    return int(state.extra.get(RETRIES_FIELD, 0))


def retry_record(
    history: History, slot: str, forgotten: set[str], now: float
) -> tuple[int, dict[str, Any]]:
    """The run's next retry number and the record of it: the failure it retries, and the
    records of the step at ``slot`` (``forgotten``: its op slots) it sets aside."""
    state = history.state
    k = retries_of(state) + 1
    ops = {s: history.ops[s].kept() for s in forgotten}
    bases: dict[str, int] = {}
    for s in forgotten | set(history.attempts.under(slot)):
        op = history.ops[s] if s in forgotten else OpRecord()
        numbers = [a.number for a in history.attempts.get(s, [])]
        numbers += [int(op.attempt or 0), int((op.error or {}).get("attempts") or 0)]
        bases[s] = max([base(history, s), *numbers])
    record = {
        "k": k,
        "at": now,
        "failed_at": state.updated_at,
        "error": state.error,
        "ops": ops,
        "bases": {s: n for s, n in bases.items() if n},
    }
    return k, record


def base(history: History, slot: str) -> int:
    """The number of the step's last attempt before the latest retry of the run that set it
    aside (0: none); this round's attempts are numbered after it."""
    if not history.retries:
        return 0
    found = 0
    for record in history.retries.get(slot.split(".", 1)[0], ()):  # oldest retry first
        found = int(record.get("bases", {}).get(slot, found))
    return found


def retried_at(history: History, slot: str) -> float | None:
    """When the step at ``slot`` (or the one it is a branch of) was last retried."""
    records = history.retries.get(slot.split(".", 1)[0]) if history.retries else None
    return float(records[-1]["at"]) if records else None


def rounds_before(history: History, slot: str, attempt: int) -> int:
    """How many retries of the run came before attempt ``attempt`` of ``slot``."""
    records = history.retries.get(slot.split(".", 1)[0], ()) if history.retries else ()
    return sum(1 for record in records if int(record.get("bases", {}).get(slot, 0)) < attempt)


def set_aside_failures(history: History) -> list[tuple[str, OpRecord, int]]:
    """The final activity failures that retries set aside: (slot, op record, retries before
    it), by slot then retry."""
    out = []
    for _, records in sorted(history.retries.items()):
        for record in records:
            for slot, kept in sorted(record.get("ops", {}).items()):
                op = OpRecord.from_map(kept)
                if _failed_activity(op):
                    out.append((slot, op, int(record["k"]) - 1))
    return out


def _failed_activity(op: OpRecord) -> bool:
    return not op.ok and (op.error or {}).get("kind") == "activity"


def failed_attempts(history: History) -> list[dict[str, Any]]:
    """Every stored failed activity attempt, by step then attempt: the kept retry records
    (the newest ``ATTEMPT_HISTORY`` of each step), each final failure a retry of the run set
    aside (its ``retry_at`` is that retry), and the step's final failure, if it failed."""
    finals: list[tuple[str, OpRecord, float | None]] = []
    for slot, op, before in set_aside_failures(history):
        finals.append((slot, op, float(history.retries[slot.split(".", 1)[0]][before]["at"])))
    for slot, op in history.ops.items():
        if _failed_activity(op):
            finals.append((slot, op, None))
    rows: list[dict[str, Any]] = []
    for slot, records in history.attempts.items():
        for record in records:
            activity = str(record.signature or "run:")[len("run:") :]
            failure = (record.error_type, record.message, record.started_at, record.traceback)
            rows.append(_row(history, slot, activity, record.number, record.at, *failure))
            rows[-1]["retry_at"] = record.due
    for slot, op, retried in finals:
        err = op.error or {}
        activity = err.get("activity") or ""
        failure = (err.get("type", ""), err.get("message", ""), err.get("s"), err.get("tb"))
        rows.append(_row(history, slot, activity, int(err["attempts"]), op.at, *failure))
        rows[-1]["retry_at"] = retried
    rows.sort(key=lambda row: (row["slot"], row["attempt"]))
    return rows


def _row(
    history: History,
    slot: str,
    activity: str,
    attempt: int,
    failed_at: float | None,
    error_type: str,
    message: str,
    started_at: float | None,
    traceback: str | None,
) -> dict[str, Any]:
    """One row: a retry record (its signature names the activity) or a final failure (its
    error record does)."""
    return {
        "step": keys.describe_slot(slot),
        "slot": slot,
        "activity": str(activity),
        "attempt": attempt,
        "error_type": error_type,
        "message": message,
        "failed_at": failed_at,
        "retry_at": None,
        "started_at": started_at,
        "traceback": traceback,
        "after_retries": rounds_before(history, slot, attempt),
    }


Unfinished = tuple[str, str, str, int, float | None, str]
"""A step with retry records and no outcome: (slot, operation, status, attempts failed,
due, detail)."""


def unfinished(history: History) -> list[Unfinished]:
    """Steps whose retry records are the newest thing stored of them: ``retrying`` (its next
    attempt is due), or ``waiting`` when those records are from before a retry of the run
    and the attempt that retry runs is not recorded yet."""
    out: list[Unfinished] = []
    for slot, records in history.attempts.items():
        if not records:
            continue
        last = records[-1]
        failed, operation = last.number, str(last.signature or "run")
        before = base(history, slot)
        if before and failed <= before:  # set aside by a retry: this round has no record yet
            detail = f"run again by a retry of the run; attempt {before + 1} is not recorded yet"
            out.append((slot, operation, "waiting", before, None, detail))
            continue
        detail = (
            f"attempt {failed} failed: {last.error_type}: {last.message}; "
            f"attempt {failed + 1} is due then"
        )
        out.append((slot, operation, "retrying", failed, last.due, detail))
    return out


def with_retry_note(history: History, slot: str, detail: str) -> str:
    """A committed step's detail, and what a retry of the run set aside of it, if one did."""
    records = history.retries.get(slot.split(".", 1)[0]) if history.retries else None
    kept = records[-1].get("ops", {}).get(slot) if records else None
    if records is None or kept is None:
        return detail
    op = OpRecord.from_map(kept)
    err = op.error or {}
    said = f": {err.get('type')}: {err.get('message')}" if not op.ok else ""
    note = f"run again by retry {records[-1]['k']} of the run (it had ended{said or ' ok'})"
    return f"{detail}; {note}" if detail else note
