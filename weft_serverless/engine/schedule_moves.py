"""Creating, finding and listing schedules, mixed into ``Engine`` (one-line hand-offs to
``schedules``) so that the facade stays small."""

from __future__ import annotations

import datetime
from abc import abstractmethod
from typing import Any

from weft_serverless.errors import ScheduleNotFoundError

from .config import Duration
from .handle import WorkflowHandle
from .runtime import Runtime
from .schedules import manage
from .schedules.handle import ScheduleHandle
from .schedules.manage import ScheduleDescription
from .schedules.spec import DEFAULT_CATCHUP_WINDOW, build_spec
from .session import Session


class ScheduleMoves:
    """``schedule``, ``get_schedule`` and ``list_schedules`` (see docs/api.md, Schedules)."""

    _rt: Runtime
    _session: Session

    @abstractmethod
    def _open(self, workflow_id: str | None = None) -> str: ...

    @abstractmethod
    def get_handle(self, workflow_id: str) -> WorkflowHandle: ...

    def schedule(
        self,
        schedule_id: str,
        workflow_type: str,
        input: Any = None,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup_window: Duration = DEFAULT_CATCHUP_WINDOW,
        jitter: Duration | None = None,
        start_at: float | datetime.datetime | None = None,
        end_at: float | datetime.datetime | None = None,
    ) -> ScheduleHandle:
        """Create a schedule that starts ``workflow_type`` runs on ``cron`` or ``every``."""
        self._open()
        checked = manage.check_schedule_id(schedule_id)
        spec = build_spec(
            cron=cron,
            every=every,
            timezone=timezone,
            overlap=overlap,
            catchup_window=catchup_window,
            jitter=jitter,
            start_at=start_at,
            end_at=end_at,
        )
        manage.create(self._rt, checked, workflow_type, input, spec)
        return self._schedule_handle(checked)

    def get_schedule(self, schedule_id: str) -> ScheduleHandle:
        """A handle on an existing schedule (``ScheduleNotFoundError`` if there is none)."""
        self._open()
        checked = manage.check_schedule_id(schedule_id)
        if not manage.exists(self._rt, checked):
            raise ScheduleNotFoundError(checked)
        return self._schedule_handle(checked)

    def list_schedules(self) -> list[ScheduleDescription]:
        """Every schedule, in id order."""
        self._open()
        return manage.list_all(self._rt)

    def _schedule_handle(self, schedule_id: str) -> ScheduleHandle:
        def wake(workflow_id: str) -> None:
            self._session.wake(workflow_id, "start")

        return ScheduleHandle(self._rt, schedule_id, wake, self.get_handle)
