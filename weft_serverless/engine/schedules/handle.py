"""``ScheduleHandle``: what a caller holds for one schedule; each method reads or changes
the stored record (nothing is cached), so handles on several engines agree."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from weft_serverless.commands import Duration
from weft_serverless.engine.handle import WorkflowHandle
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.schedules import firing, manage
from weft_serverless.engine.schedules import record as records
from weft_serverless.engine.schedules.manage import ScheduleDescription
from weft_serverless.engine.schedules.spec import changed, instant
from weft_serverless.errors import InvalidScheduleError

_UNCHANGED: Any = object()


class ScheduleHandle:
    """One schedule by id. ``trigger`` and ``backfill`` return handles on the runs started."""

    def __init__(
        self,
        rt: Runtime,
        schedule_id: str,
        wake: firing.Wake,
        handle_of: Callable[[str], WorkflowHandle],
    ) -> None:
        self._rt = rt
        self.id = schedule_id
        self._wake = wake
        self._handle_of = handle_of

    def __repr__(self) -> str:
        return f"ScheduleHandle({self.id!r})"

    def describe(self) -> ScheduleDescription:
        return manage.describe(self._rt, records.read(self._rt, self.id)[0])

    def pause(self) -> None:
        """Stop firing (the next fire's timer is dropped); runs already started go on."""
        manage.change(self._rt, self.id, lambda rec: manage.pause(self._rt, rec))

    def resume(self) -> None:
        """Fire again from the first fire after now; fires while paused are not made up."""
        manage.change(self._rt, self.id, lambda rec: manage.resume(self._rt, rec))

    def trigger(self) -> WorkflowHandle | None:
        """Fire now, as a fire of its own: its run id carries this call's second and a mark
        of its own (two triggers in one second are two runs, and neither takes a scheduled
        fire's id); None when overlap skipped or queued the fire."""
        started = firing.trigger(self._rt, self.id, float(int(self._rt.now())), self._wake)
        return None if started is None else self._handle_of(started)

    def update(
        self,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        input: Any = _UNCHANGED,
        overlap: str | None = None,
    ) -> None:
        """Change the timing (cron replaces an interval and back), input or overlap policy;
        the next fire is recomputed from now. Checked before anything is written."""
        rt = self._rt
        changed(records.read(rt, self.id)[0].spec, cron, every, overlap)  # checks, raises
        encoded = None if input is _UNCHANGED else rt.encode_payload(input, "schedule input")

        def apply(rec: records.ScheduleRecord) -> tuple[records.ScheduleRecord, list[Any]]:
            spec = changed(rec.spec, cron, every, overlap)
            new = replace(rec, spec=spec, input=rec.input if encoded is None else encoded)
            if rec.paused:
                return new, []
            return new.rearmed(rt, rt.now())

        manage.change(rt, self.id, apply)

    def delete(self) -> None:
        """Delete the schedule; the runs it started are left as they are."""
        manage.delete(self._rt, self.id)

    def backfill(
        self, start: float | datetime.datetime, end: float | datetime.datetime
    ) -> list[WorkflowHandle]:
        """Fire every fire of the past interval [start, end], oldest first, each with the
        overlap policy applied; a fire whose run exists already is passed over."""
        begin, until = instant(start, "start"), instant(end, "end")
        if begin is None or until is None:
            raise InvalidScheduleError("backfill needs both start and end", "start")
        if until < begin:
            raise InvalidScheduleError("backfill needs start <= end", "end")
        if until > self._rt.now():
            raise InvalidScheduleError("backfill covers a past interval: end must be <= now", "end")
        started = firing.backfill(self._rt, self.id, begin, until, self._wake)
        return [self._handle_of(workflow_id) for workflow_id in started]
