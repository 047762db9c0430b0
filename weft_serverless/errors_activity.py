"""Errors of an activity's time limits: which limit passed, for the attempt and the step."""

from __future__ import annotations

from typing import Literal

from weft_serverless.errors import ActivityFailedError, WeftError

TimeoutKind = Literal["start_to_close", "heartbeat", "schedule_to_close"]
TIMEOUT_KINDS: tuple[TimeoutKind, ...] = ("start_to_close", "heartbeat", "schedule_to_close")


class ActivityTimeoutError(WeftError):
    """An activity passed one of its time limits; ``kind`` says which.

    ``start_to_close``: one attempt ran past its ``timeout``; ``heartbeat``: an attempt went
    longer than ``heartbeat_timeout`` without heartbeating (both retried per the policy);
    ``schedule_to_close``: the step's budget across all attempts and backoffs ran out (never
    retried).
    """

    def __init__(self, message: str, kind: TimeoutKind = "start_to_close") -> None:
        super().__init__(message)
        self.kind: TimeoutKind = kind


class ActivityTimedOutError(ActivityFailedError, ActivityTimeoutError):
    """A ``ctx.run`` step that failed because a time limit passed: what the workflow catches
    at the yield, an ``ActivityFailedError`` and an ``ActivityTimeoutError`` at once."""

    def __init__(self, activity: str, error_message: str, attempts: int, kind: TimeoutKind) -> None:
        ActivityFailedError.__init__(
            self, activity, "ActivityTimeoutError", error_message, attempts
        )
        self.kind = kind


class ActivityCancelledError(WeftError):
    """What an activity may raise once ``current_activity().cancelled`` is set, to stop.

    The engine discards whatever a given-up attempt ends with, so raising it (or returning)
    only ends the attempt sooner; raised without a cancel it is an ordinary failed attempt.
    """
