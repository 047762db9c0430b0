"""The errors of schedules, apart from ``errors.py`` only to keep modules small; they are
``WeftError``s like every other, exported by the public package."""

from __future__ import annotations

from weft_serverless.errors import InvalidArgumentError, WeftError


class InvalidScheduleError(InvalidArgumentError):
    """A schedule's definition cannot be used (cron, interval, time zone, overlap, window);
    ``field`` names the argument to fix. Nothing was stored."""


class ScheduleAlreadyExistsError(WeftError):
    """A schedule with this id exists; update it, or delete it first."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} already exists; use get_schedule(...).update(...) to "
            "change it, or delete it first"
        )
        self.schedule_id = schedule_id


class ScheduleNotFoundError(WeftError):
    """No schedule has this id (never created, or deleted)."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} does not exist; list_schedules() shows the ones that do"
        )
        self.schedule_id = schedule_id
