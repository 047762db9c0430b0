"""Creating and changing schedules from outside: each change is one conditional batch on the
record as read, carrying the fence every outside write carries; every argument is checked
before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.engine.config import check_id
from weft_serverless.engine.runs.commit import write
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.schedules import record as records
from weft_serverless.engine.schedules.firing import ATTEMPTS, live_runs
from weft_serverless.engine.schedules.record import ScheduleRecord
from weft_serverless.engine.schedules.spec import Spec
from weft_serverless.errors import (
    InvalidArgumentError,
    ScheduleAlreadyExistsError,
    UnknownWorkflowTypeError,
    WeftError,
)
from weft_serverless.identifiers import MAX_WORKFLOW_ID_BYTES
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op

RUN_ID_SUFFIX_BYTES = len("-20260101T000000Z")

Change = Callable[[ScheduleRecord], tuple[ScheduleRecord, list[Op]] | None]
"""What a change makes of the record read: the new record and other writes, or None."""


@dataclass(frozen=True, slots=True)
class ScheduleDescription:
    """A schedule as stored. Times are epoch seconds; ``next_fire_at`` is the nominal time
    of the next fire (None while paused or after ``end_at``); ``running`` lists the runs it
    started that are not terminal yet."""

    id: str
    workflow_type: str
    cron: str | None
    every: float | None
    timezone: str
    overlap: str
    paused: bool
    next_fire_at: float | None
    last_fire_at: float | None
    fired: int
    missed: int
    skipped: int
    running: list[str]
    catchup_window: float
    jitter: float
    start_at: float | None
    end_at: float | None
    queued_fire_at: float | None
    input: Any = None


def check_schedule_id(schedule_id: object) -> str:
    """A schedule id is a workflow id that leaves room for its runs' time suffix."""
    checked = check_id(schedule_id, "schedule_id")
    if len(checked.encode()) + RUN_ID_SUFFIX_BYTES > MAX_WORKFLOW_ID_BYTES:
        raise InvalidArgumentError(
            f"schedule_id must be at most {MAX_WORKFLOW_ID_BYTES - RUN_ID_SUFFIX_BYTES} bytes "
            "(its runs' ids add the fire time)",
            "schedule_id",
        )
    return checked


def create(rt: Runtime, schedule_id: str, workflow_type: str, input: Any, spec: Spec) -> None:
    if workflow_type not in rt.definitions:
        known = ", ".join(sorted(rt.definitions)) or "none"
        raise UnknownWorkflowTypeError(
            f"workflow type {workflow_type!r} is not registered with this engine (registered: "
            f"{known}); pass it in Engine.create(workflows={{...}})"
        )
    encoded = rt.encode_payload(input, "schedule input")
    now = rt.now()
    rec, ops = ScheduleRecord(schedule_id, workflow_type, encoded, spec, now).rearmed(rt, now)
    if write(rt, [Condition(keys.schedule_key(schedule_id), None)], [records.put_op(rec), *ops]):
        return
    raise ScheduleAlreadyExistsError(schedule_id)


def exists(rt: Runtime, schedule_id: str) -> bool:
    return rt.storage.get(keys.schedule_key(schedule_id)) is not None


def change(rt: Runtime, schedule_id: str, what: Change) -> None:
    """Apply ``what`` to the record read, conditional on it; re-read and re-apply on a race."""
    for _ in range(ATTEMPTS):
        rec, raw = records.read(rt, schedule_id)
        changed = what(rec)
        if changed is None:
            return
        new, ops = changed
        if write(rt, [Condition(keys.schedule_key(schedule_id), raw)], [records.put_op(new), *ops]):
            return
    raise WeftError(f"schedule {schedule_id!r} kept racing other writers; try again")


def pause(rt: Runtime, rec: ScheduleRecord) -> tuple[ScheduleRecord, list[Op]] | None:
    if rec.paused:
        return None
    timer = rec.timer_key()
    return replace(rec, paused=True, next=None, timer=None), [Delete(timer)] if timer else []


def resume(rt: Runtime, rec: ScheduleRecord) -> tuple[ScheduleRecord, list[Op]] | None:
    if not rec.paused:
        return None
    return replace(rec, paused=False).rearmed(rt, rt.now())


def delete(rt: Runtime, schedule_id: str) -> None:
    """Drop the record and its next fire's timer; runs it started are left as they are."""
    for _ in range(ATTEMPTS):
        rec, raw = records.read(rt, schedule_id)
        ops: list[Op] = [Delete(keys.schedule_key(schedule_id))]
        timer = rec.timer_key()
        if timer is not None:
            ops.append(Delete(timer))
        if write(rt, [Condition(keys.schedule_key(schedule_id), raw)], ops):
            return
    raise WeftError(f"schedule {schedule_id!r} kept racing other writers; try again")


def describe(rt: Runtime, rec: ScheduleRecord) -> ScheduleDescription:
    spec = rec.spec
    return ScheduleDescription(
        id=rec.id,
        workflow_type=rec.workflow_type,
        cron=spec.cron,
        every=spec.every,
        timezone=spec.timezone,
        overlap=spec.overlap,
        paused=rec.paused,
        next_fire_at=rec.next,
        last_fire_at=rec.last,
        fired=rec.fired,
        missed=rec.missed,
        skipped=rec.skipped,
        running=list(live_runs(rt, rec.running)),
        catchup_window=spec.catchup_window,
        jitter=spec.jitter,
        start_at=spec.start_at,
        end_at=spec.end_at,
        queued_fire_at=rec.queued,
        input=decode(rec.input),
    )


def list_all(rt: Runtime) -> list[ScheduleDescription]:
    """Every schedule in id order: one range read, plus one read per run still listed."""
    return [
        describe(rt, ScheduleRecord.from_bytes(value))
        for _, value in rt.storage.scan(keys.SCHEDULE_PARTITION)
    ]
