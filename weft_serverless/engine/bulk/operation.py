"""Bulk operations: a stored record that advances a listing page at a time (ADR 0031).

The record (kind, filter, arguments, cursor, counts, audit fields) and a ``bulk`` timer are
written in one batch before the first run is touched. Each page is acted on, then the record
saves the next cursor and the counts in one conditional write on the record as read, moving
the timer ``GRACE`` seconds on: while the operation progresses its timer never falls due, and
once its process dies the next maintenance pass finds the timer due and carries on from the
stored cursor. A worker that loses that write (another one advanced the record) stops.

Each run is acted on at most once per operation, even when a crash repeats a page: a cancel
of an ended run does nothing, a signal carries ``signal_id = "bulk-<operation id>"`` (a
repeat is deduplicated), and a retry writes a marker with its transition (``once``), in the
run's partition so that purging the run deletes it.
Runs are taken as the listing returns them when the page is read: a run that matches only
after the dry run is acted on too (the count is not required to be unchanged).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import decode, decode_record, encode
from weft_serverless.engine.bulk.request import CANCEL, RETRY, SIGNAL, BulkRequest, page
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.runs import control, signals
from weft_serverless.engine.runs.commit import write
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.errors import (
    BulkOperationNotFoundError,
    EngineLeaseLostError,
    InvalidArgumentError,
    StorageError,
    WeftError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put

GRACE = 30.0  # seconds without progress after which maintenance continues an operation
RUNNING_OP = "running"
COMPLETED = "completed"
_MAX_ERRORS = 10  # failed runs kept in the record (id and error code), the first ones
MARKS_RUNS = "marks_runs"
"""Set in every operation stored from this release on: its retry markers live in the runs'
partitions (purged with them); an operation stored before keeps its markers where they are,
so a resume of it still finds the runs it retried."""

Woken = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BulkOperation:
    """A bulk operation as stored, which is also its audit record: who asked (``actor``,
    and ``caller``, the API caller's identity when it came through the HTTP API), when, what
    (``kind``, ``filters``, ``signal``), how far it got (``cursor`` None once completed) and
    what it did: ``done`` runs acted on (counted once even when a crash repeated their
    page), ``skipped`` runs matched but already moved (ended, no longer failed), ``failed``
    runs it could not act on (``errors`` names the first ones)."""

    id: str
    kind: str
    status: str
    filters: dict[str, Any]
    actor: str
    caller: str | None
    reason: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    done: int
    skipped: int
    failed: int
    signal: str | None = None
    cursor: str | None = None
    errors: list[dict[str, str]] = field(default_factory=list)

    @property
    def matched(self) -> int:
        return self.done + self.skipped + self.failed

    def as_dict(self) -> dict[str, Any]:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {**fields, "matched": self.matched}


def create(
    rt: Runtime,
    request: BulkRequest,
    *,
    actor: str,
    caller: str | None,
    reason: str | None,
    page_size: int,
) -> str:
    """Store the operation and its timer in one batch; returns its id."""
    now = rt.now()
    operation_id = f"{keys.ms(now):013d}-{uuid.uuid4().hex[:8]}"
    timer = timers.timer_key(rt.shards, timers.BULK, operation_id, now + GRACE)
    record = {
        "id": operation_id,
        "kind": request.kind,
        "filters": request.filters,
        "name": request.name,
        "payload": request.payload,
        "actor": actor,
        "caller": caller,
        "reason": reason,
        "page": page_size,
        "status": RUNNING_OP,
        "cursor": None,
        "created": now,
        "updated": now,
        "finished": None,
        "done": 0,
        "skipped": 0,
        "failed": 0,
        "errors": [],
        "timer": timers.timer_ref(timer),
        MARKS_RUNS: True,
    }
    key = keys.bulk_key(operation_id)
    ops: list[Op] = [
        _put(key, record),
        _put(timer, None, raw=timers.timer_value(operation_id, timers.BULK)),
    ]
    if not write(rt, [Condition(key, None)], ops):
        raise WeftError("the bulk operation could not be stored; try again")
    return operation_id


def advance(
    rt: Runtime,
    operation_id: str,
    stop: Callable[[], bool],
    woken: Woken,
    after_page: Callable[[], None],
) -> BulkOperation | None:
    """Act on pages from the stored cursor until done, ``stop()`` says time is short (at a
    page boundary, leaving the timer due now), or another worker advanced it. None: no
    such operation."""
    while True:
        key = keys.bulk_key(operation_id)
        current = rt.storage.get(key)
        if current is None:
            return None
        record = decode_record(current, f"bulk operation {operation_id!r}")
        if record["status"] == COMPLETED:
            return _describe(record)
        rows, cursor = page(rt, record["filters"], record["page"], record["cursor"])
        for row in rows:
            outcome, code = _act(rt, record, row.id, woken)
            record[outcome] += 1
            if code and len(record["errors"]) < _MAX_ERRORS:
                record["errors"].append({"workflow_id": row.id, "code": code})
        after_page()
        stopping = cursor is not None and stop()
        saved = _save(rt, key, current, record, cursor, stopping)
        if saved is None:  # another worker advanced it: report what is stored
            return describe(rt, operation_id)
        if saved["status"] == COMPLETED or stopping:
            return _describe(saved)


def _act(rt: Runtime, record: dict[str, Any], workflow_id: str, woken: Woken) -> tuple[str, str]:
    """Act on one run: ``done``, ``skipped`` (already moved) or ``failed`` (logged, with
    the error's code)."""
    kind = record["kind"]
    try:
        if kind == CANCEL:
            state, cancelled = control.cancel(rt, workflow_id)
            if cancelled and state.parent and state.parent.get("await", True):
                woken(state.parent["id"])
            return ("done" if cancelled else "skipped"), ""
        if kind == SIGNAL:
            payload = decode(record["payload"])
            signal_id = f"bulk-{record['id']}"
            if not signals.deliver(rt, workflow_id, record["name"], payload, signal_id):
                return "done", ""  # delivered by this operation, on a page not saved then
        elif kind == RETRY:
            marking = keys.bulk_run_key if record.get(MARKS_RUNS) else keys.legacy_bulk_run_key
            marker = marking(record["id"], workflow_id)
            if not control.retry_failed(rt, workflow_id, once=marker):
                # Its marker: retried by this operation on a page not saved then.
                return ("skipped" if rt.storage.get(marker) is None else "done"), ""
        woken(workflow_id)
        return "done", ""
    except (WorkflowNotFoundError, WorkflowNotRunningError):
        return "skipped", ""  # purged or ended since it was listed
    except InvalidArgumentError:
        return "skipped", ""  # a retry of a run that is no longer failed
    except (StorageError, EngineLeaseLostError):
        raise  # the page is not saved: a resume repeats it, each run at most once
    except WeftError as exc:
        logger.warning("bulk %s %s of %s failed: %s", record["id"], kind, workflow_id, exc)
        return "failed", exc.code


def _save(
    rt: Runtime,
    key: Key,
    current: bytes,
    record: dict[str, Any],
    cursor: str | None,
    stopping: bool,
) -> dict[str, Any] | None:
    """Save the page's cursor and counts and move the timer; None: another worker moved the
    record first (it carries on; this one stops)."""
    now = rt.now()
    old_timer = Key(*record["timer"])
    ops: list[Op] = [Delete(old_timer)]
    record.update(cursor=cursor, updated=now)
    if cursor is None:
        record.update(status=COMPLETED, finished=now, timer=None)
    else:
        due = now if stopping else now + GRACE
        timer = timers.timer_key(rt.shards, timers.BULK, record["id"], due)
        if timer == old_timer:
            # The same instant: the old key may be the timer being fired, which the pass
            # deletes once this returns; the new one must outlive that, a millisecond on.
            timer = timers.timer_key(rt.shards, timers.BULK, record["id"], due + 0.001)
        record["timer"] = timers.timer_ref(timer)
        ops.append(_put(timer, None, raw=timers.timer_value(record["id"], timers.BULK)))
    ops.append(_put(key, record))
    return record if write(rt, [Condition(key, current)], ops) else None


def describe(rt: Runtime, operation_id: str) -> BulkOperation:
    current = rt.storage.get(keys.bulk_key(operation_id))
    if current is None:
        raise BulkOperationNotFoundError(operation_id)
    return _describe(decode_record(current, f"bulk operation {operation_id!r}"))


def list_all(rt: Runtime) -> list[BulkOperation]:
    """Every stored operation, oldest first (one range read of their partition)."""
    return [
        _describe(decode_record(value, f"bulk operation {sort!r}"))
        for sort, value in rt.storage.scan(keys.BULK_PARTITION)
    ]


def check_operation_id(operation_id: Any) -> str:
    if not isinstance(operation_id, str) or not operation_id:
        raise InvalidArgumentError("operation_id must be a non-empty string", "operation_id")
    return operation_id


def _describe(record: dict[str, Any]) -> BulkOperation:
    return BulkOperation(
        id=record["id"],
        kind=record["kind"],
        status=record["status"],
        filters=record["filters"],
        actor=record["actor"],
        caller=record["caller"],
        reason=record["reason"],
        created_at=record["created"],
        updated_at=record["updated"],
        finished_at=record["finished"],
        done=record["done"],
        skipped=record["skipped"],
        failed=record["failed"],
        signal=record["name"],
        cursor=record["cursor"],
        errors=list(record["errors"]),
    )


def _put(key: Key, record: dict[str, Any] | None, *, raw: bytes | None = None) -> Op:
    return Put(key, raw if raw is not None else encode(record))
