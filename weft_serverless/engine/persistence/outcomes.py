"""What a step gives back to the workflow, and how stored failures become exceptions again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.engine.persistence.records import error_record
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.errors import (
    TIMEOUT_KINDS,
    ActivityFailedError,
    ActivityTimedOutError,
    ChildWorkflowFailedError,
    WeftError,
)
from weft_serverless.storage.base import Condition, Op


@dataclass(slots=True)
class Outcome:
    """What the generator receives at its yield: a value, or an error to raise there."""

    value: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class Done:
    outcome: Outcome
    record: OpRecord
    conditions: list[Condition] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    # Deletes of timers this step made stale: best effort, split off if the batch is full.
    cleanup: list[Op] = field(default_factory=list)


def error_from_record(err: dict[str, Any]) -> BaseException:
    """Rebuild the exception a stored failure raises at the workflow's yield."""
    kind = err.get("kind")
    if kind == "activity" and err.get("timeout") in TIMEOUT_KINDS:
        return ActivityTimedOutError(
            err["activity"], err["message"], err["attempts"], err["timeout"]
        )
    if kind == "activity":
        return ActivityFailedError(err["activity"], err["type"], err["message"], err["attempts"])
    if kind == "child":
        return ChildWorkflowFailedError(err["child_id"], err["status"], err["type"], err["message"])
    return WeftError(f"{err.get('type')}: {err.get('message')}")


def error_to_record(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ActivityFailedError):
        timeout = {"timeout": exc.kind} if isinstance(exc, ActivityTimedOutError) else {}
        return error_record(
            "activity",
            exc.error_type,
            exc.error_message,
            activity=exc.activity,
            attempts=exc.attempts,
            **timeout,
        )
    if isinstance(exc, ChildWorkflowFailedError):
        return error_record(
            "child", exc.error_type, exc.error_message, child_id=exc.child_id, status=exc.status
        )
    return error_record("error", type(exc).__name__, str(exc))


class RaiseAtYield(Exception):
    """Internal: an error to throw into the generator at this yield, with nothing recorded."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
