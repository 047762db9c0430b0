"""Creating, finding and listing schedules: the engine's ``Schedules`` part.

``Engine`` hands ``schedule``, ``get_schedule`` and ``list_schedules`` to it; each is a
hand-off to ``schedules``, and a handle's fire starts its run through the engine's
``Session``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from weft_serverless.engine.config import Duration
from weft_serverless.engine.handle import WorkflowHandle
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.schedules import manage
from weft_serverless.engine.schedules.handle import ScheduleHandle
from weft_serverless.engine.schedules.manage import ScheduleDescription
from weft_serverless.engine.schedules.spec import build_spec
from weft_serverless.engine.session import Session
from weft_serverless.errors import ScheduleNotFoundError


class Schedules:
    """``schedule``, ``get_schedule`` and ``list_schedules`` (see docs/api.md, Schedules).

    ``get_handle`` turns a started run's id into the engine's handle on it.
    """

    def __init__(
        self, rt: Runtime, session: Session, get_handle: Callable[[str], WorkflowHandle]
    ) -> None:
        self._rt = rt
        self._session = session
        self._get_handle = get_handle

    def create(
        self,
        schedule_id: str,
        workflow_type: str,
        input: Any,
        *,
        cron: str | None,
        every: Duration | None,
        timezone: str,
        overlap: str,
        catchup_window: Duration,
        jitter: Duration | None,
        start_at: float | datetime.datetime | None,
        end_at: float | datetime.datetime | None,
    ) -> ScheduleHandle:
        self._session.opened()
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
        return self._handle(checked)

    def get(self, schedule_id: str) -> ScheduleHandle:
        self._session.opened()
        checked = manage.check_schedule_id(schedule_id)
        if not manage.exists(self._rt, checked):
            raise ScheduleNotFoundError(checked)
        return self._handle(checked)

    def list_all(self) -> list[ScheduleDescription]:
        self._session.opened()
        return manage.list_all(self._rt)

    def _handle(self, schedule_id: str) -> ScheduleHandle:
        def wake(workflow_id: str) -> None:
            self._session.wake(workflow_id, "start")

        return ScheduleHandle(self._rt, schedule_id, wake, self._get_handle)
