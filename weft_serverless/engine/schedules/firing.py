"""Firing a schedule: each fire is one atomic batch that advances the schedule's record and
starts the run (``{schedule_id}-{T:%Y%m%dT%H%M%SZ}``), conditional on the record as read.
A manual trigger is a fire of its own: its run ends in a mark (``MANUAL_MARKS``) instead of
``Z``, the first one free in that second, so it never takes a scheduled fire's id nor
another trigger's (ADR 0043).

Two engines firing the same tick race on that condition (and on the run's state being
absent): one batch lands, the other re-reads and finds nothing left to do. Under ``lease``
and ``workflow-lease`` the batch carries the start's ownership fragment (the store-lease
condition, or this engine's claim on the new run); a batch that starts nothing carries the
fence every outside write carries.

Catch-up: one pass starts at most the most recent due fire, and only when it is found within
``catchup_window`` of its due time; every older due fire is counted in ``missed`` and logged.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from weft_serverless.engine.persistence.records import SCHEDULE_FIELD, TERMINAL, WorkflowState
from weft_serverless.engine.runs import control, starting
from weft_serverless.engine.runs.commit import write, write_claiming
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.engine.schedules import record as records
from weft_serverless.engine.schedules.record import ScheduleRecord
from weft_serverless.errors import (
    InvalidScheduleError,
    ScheduleNotFoundError,
    WeftError,
    WorkflowBusyError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op

Wake = Callable[[str], None]
"""Drives a run a fire started (the pass's dispatcher, or the engine's session)."""
ATTEMPTS = 8
MAX_BACKFILL = 1000
"""The most fires one ``backfill`` call starts or counts."""
WAKE_FIELD = "schedule_wake"
"""Set on runs of a ``queue`` schedule: their end arms the schedule's timer at once."""
MANUAL_MARKS = "abcdefghijklmnopqrstuvwxyz0123456789"
"""What ends a manual trigger's run id in place of a fire's ``Z``: the n-th trigger of one
second takes the n-th mark, so the id keeps a fire id's length (a schedule id leaves room
for that suffix and no more) and still says when it was asked for."""
QUEUED_RUN = "queued_run"
"""The record's ``extra`` names the run id a queued manual trigger starts under."""


def run_id(schedule_id: str, fire: float) -> str:
    """The id of the run a fire at ``fire`` (epoch seconds) starts: the same on every engine."""
    moment = datetime.datetime.fromtimestamp(fire, datetime.UTC)
    return f"{schedule_id}-{moment:%Y%m%dT%H%M%SZ}"


def manual_run_id(schedule_id: str, at: float, nth: int) -> str:
    """The id of the ``nth`` manual trigger (from 0) in the second of ``at``."""
    return run_id(schedule_id, at)[:-1] + MANUAL_MARKS[nth]


@dataclass(slots=True)
class _Plan:
    """One batch: the record after it, its other writes, and the run it starts (if any)."""

    record: ScheduleRecord
    ops: list[Op] = field(default_factory=list)
    start: WorkflowState | None = None
    cancel: tuple[str, ...] = ()
    more: bool = False  # a later fire is still due: plan again after this one lands


def live_runs(rt: Runtime, running: tuple[str, ...]) -> tuple[str, ...]:
    """The runs in ``running`` that are not terminal (one read each; a purged run is not)."""
    live = []
    for workflow_id in running:
        data = rt.storage.get(keys.state_key(workflow_id))
        if data is not None and WorkflowState.from_bytes(data).status not in TERMINAL:
            live.append(workflow_id)
    return tuple(live)


def fire_due(rt: Runtime, schedule_id: str, wake: Wake) -> None:
    """The schedule's timer fired: start a queued fire whose slot freed, and the most recent
    due fire (overlap applies), then arm the next fire's timer."""
    taken: set[str] = set()
    for _ in range(ATTEMPTS):
        try:
            rec, raw = records.read(rt, schedule_id)
        except ScheduleNotFoundError:
            return  # deleted: a stale timer
        plan = _plan_due(rt, rec, rt.now(), taken)
        if plan is None:
            return
        started = _commit(rt, raw, plan)
        if started is None:
            # Raced: another engine fired, or this fire's run exists already (a backfill
            # started it): then the fire is done, and only the record moves.
            if plan.start is not None and rt.storage.get(keys.state_key(plan.start.id)):
                taken.add(plan.start.id)
            continue
        if started:
            wake(started)
        if not plan.more:
            return
    raise _racing(schedule_id)  # the pass keeps the timer: a later pass fires it


def trigger(rt: Runtime, schedule_id: str, at: float, wake: Wake) -> str | None:
    """Fire now (``at``) under the first manual run id of that second nobody has: the run's
    id, or None when the overlap policy skipped or queued it. Raises ``WorkflowBusyError``
    once every mark of the second is taken."""
    for _ in range(ATTEMPTS * len(MANUAL_MARKS)):
        rec, raw = records.read(rt, schedule_id)
        taken = rec.extra.get(QUEUED_RUN)
        free = (
            workflow_id
            for workflow_id in (manual_run_id(schedule_id, at, n) for n in range(len(MANUAL_MARKS)))
            if workflow_id != taken and rt.storage.get(keys.state_key(workflow_id)) is None
        )
        workflow_id = next(free, None)
        if workflow_id is None:
            raise WorkflowBusyError(
                f"schedule {schedule_id!r} was triggered {len(MANUAL_MARKS)} times this "
                "second; trigger it again in the next second"
            )
        plan = _fire(rt, replace(rec, running=live_runs(rt, rec.running)), at, None, workflow_id)
        started = _commit(rt, raw, plan)
        if started is None:
            continue  # raced: the record moved, or another trigger took this id
        if started:
            wake(started)
        return started or None
    raise _racing(schedule_id)


def backfill(rt: Runtime, schedule_id: str, start: float, end: float, wake: Wake) -> list[str]:
    """Fire every nominal fire in [start, end] oldest first, overlap applied to each; a fire
    whose run exists already is passed over. Returns the ids of the runs started."""
    rec, _ = records.read(rt, schedule_id)
    fires = []
    fire = rec.spec.next_after(start - 1e-6)
    while fire is not None and fire <= end:
        fires.append(fire)
        if len(fires) > MAX_BACKFILL:
            raise InvalidScheduleError(
                f"backfill covers more than {MAX_BACKFILL} fires; split the interval", "end"
            )
        fire = rec.spec.next_after(fire)
    started = []
    for fire in fires:
        workflow_id, new = _fire_at(rt, schedule_id, fire, wake)
        if workflow_id is not None and new:
            started.append(workflow_id)
    return started


def _fire_at(rt: Runtime, schedule_id: str, at: float, wake: Wake) -> tuple[str | None, bool]:
    """One fire at ``at`` outside the timer: (the run's id or None, whether it is new)."""
    workflow_id = run_id(schedule_id, at)
    for _ in range(ATTEMPTS):
        if rt.storage.get(keys.state_key(workflow_id)) is not None:
            return workflow_id, False
        rec, raw = records.read(rt, schedule_id)
        plan = _fire(rt, replace(rec, running=live_runs(rt, rec.running)), at)
        started = _commit(rt, raw, plan)
        if started is None:
            continue
        if started:
            wake(started)
        return started or None, True
    raise _racing(schedule_id)


def _plan_due(rt: Runtime, rec: ScheduleRecord, now: float, taken: set[str]) -> _Plan | None:
    live = live_runs(rt, rec.running)
    current = replace(rec, running=live)
    if rec.queued is not None and not live and not rec.paused:
        extra = {k: v for k, v in rec.extra.items() if k != QUEUED_RUN}
        queued_run = rec.extra.get(QUEUED_RUN)  # a manual trigger's, or the fire's own id
        plan = _fire(rt, replace(current, queued=None, extra=extra), rec.queued, taken, queued_run)
        plan.more = _next_due(rec, now)
        return plan
    if not _next_due(rec, now):
        return None
    assert rec.next is not None
    spec, sid = rec.spec, rec.id
    last, due_count = spec.latest_due(sid, rec.next, now)
    assert last is not None  # rec.next itself is due
    missed = due_count - 1
    late = now - spec.due(sid, last)
    too_late = late > spec.catchup_window
    if too_late:
        missed += 1
        plan = _Plan(current)
    else:
        plan = _fire(rt, current, last, taken)
    if missed:
        latest = last if too_late else spec.at_or_before(last - 1e-3) or last
        logger.warning(
            "schedule %s missed %d fire(s), the latest %s (the pass came %.0f s after the "
            "last due fire; catchup_window %.0f s)",
            sid,
            missed,
            run_id(sid, latest),
            late,
            spec.catchup_window,
        )
    advanced, ops = replace(plan.record, missed=plan.record.missed + missed).rearmed(rt, last)
    plan.record, plan.ops = advanced, plan.ops + ops
    return plan


def _next_due(rec: ScheduleRecord, now: float) -> bool:
    if rec.paused or rec.next is None:
        return False
    return keys.is_due(now, rec.spec.due(rec.id, rec.next))


def _fire(
    rt: Runtime,
    rec: ScheduleRecord,
    fire: float,
    taken: set[str] | None = None,
    workflow_id: str | None = None,
) -> _Plan:
    """One fire at ``fire`` with the overlap policy applied; ``rec.running`` is live.
    ``taken``: run ids found existing, whose fire is done already; ``workflow_id``: the
    run's id when it is not the fire's own (a manual trigger's)."""
    overlap = rec.spec.overlap
    workflow_id = workflow_id or run_id(rec.id, fire)
    if taken and workflow_id in taken:
        return _Plan(rec)
    if rec.running and overlap == "skip":
        return _Plan(replace(rec, skipped=rec.skipped + 1))
    if rec.running and overlap == "queue":
        if rec.queued is not None:
            return _Plan(replace(rec, skipped=rec.skipped + 1))  # one fire waits at most
        extra = dict(rec.extra)
        if workflow_id != run_id(rec.id, fire):
            extra[QUEUED_RUN] = workflow_id
        return _Plan(replace(rec, queued=fire, extra=extra))
    cancel = rec.running if overlap == "cancel_running" else ()
    state = starting.new_state(rt, rec.workflow_type, workflow_id, rec.input)
    state.extra[SCHEDULE_FIELD] = rec.id
    if overlap == "queue":
        state.extra[WAKE_FIELD] = True
    running = (*(r for r in rec.running if r not in cancel), state.id)
    last = fire if rec.last is None else max(rec.last, fire)
    advanced = replace(rec, fired=rec.fired + 1, last=last, running=running)
    return _Plan(advanced, start=state, cancel=cancel)


def _commit(rt: Runtime, raw: bytes, plan: _Plan) -> str | None:
    """Write one plan; the started run's id ("" when none), or None when refused."""
    for workflow_id in plan.cancel:
        control.cancel(rt, workflow_id)
    condition = Condition(keys.schedule_key(plan.record.id), raw)
    ops = [records.put_op(plan.record), *plan.ops]
    if plan.start is None:
        return "" if write(rt, [condition], ops) else None
    epoch: bytes | None = None
    for _ in range(2):
        fragment = starting.start_fragment(rt, plan.start, epoch)
        conditions = [condition, *fragment.conditions]
        if write_claiming(rt, plan.start.id, conditions, fragment.ops + ops):
            rt.parked.discard(plan.start.id)
            logger.info("schedule %s started %s", plan.record.id, plan.start.id)
            return plan.start.id
        # The run's id was used before and purged (a trigger, purge and trigger in one
        # second; a backfill over a purged fire): its owner epoch remains, so claim on top
        # of it, as a start does. Without this every attempt was refused, a 500.
        surviving = rt.storage.get(keys.owner_epoch_key(plan.start.id))
        if surviving is None or surviving == epoch:
            return None
        epoch = surviving
    return None


def _racing(schedule_id: str) -> WeftError:
    return WeftError(f"schedule {schedule_id!r} kept racing other writers; try again")
