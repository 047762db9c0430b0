"""The durable operations a workflow yields.

A command is inert data: the driver decides, from the op log, whether to answer it from
history or to carry it out. Each works as ``x = yield cmd`` and as ``x = yield from cmd``
(the second lets a type checker infer ``x``).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from weft_serverless.errors import InvalidArgumentError, UnknownServiceError

T = TypeVar("T")


class Command(Generic[T]):
    """Base of every yieldable durable operation."""

    def signature(self) -> str:
        """Kind and name, stored with the step so replay can detect changed code."""
        raise NotImplementedError

    def __iter__(self) -> Generator[Command[T], Any, T]:
        value: T = yield self
        return value


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed activity attempt is retried, on the engine clock.

    ``non_retryable`` holds exception classes or class names; a match (by ``isinstance`` or
    by any class name in the error's MRO) stops at the first attempt. An
    ``UnknownServiceError`` is never retried whatever the policy: the engine builds its
    services once, so a retry on it would fail the same way.
    """

    max_attempts: int = 3
    initial_backoff: float = 1.0
    backoff_multiplier: float = 2.0
    max_backoff: float = 30.0
    non_retryable: tuple[type[BaseException] | str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < 0:
            raise InvalidArgumentError("backoffs must be >= 0 seconds")
        if self.backoff_multiplier < 1:
            raise InvalidArgumentError(
                f"backoff_multiplier must be >= 1, got {self.backoff_multiplier}"
            )

    def backoff(self, failed_attempt: int) -> float:
        """Seconds to wait after attempt number ``failed_attempt`` (1-based) failed."""
        delay = self.initial_backoff * self.backoff_multiplier ** (failed_attempt - 1)
        return float(min(delay, self.max_backoff))

    def is_retryable(self, error_type_names: list[str], error: BaseException | None) -> bool:
        if isinstance(error, UnknownServiceError):
            return False
        for entry in self.non_retryable:
            if isinstance(entry, str):
                if entry in error_type_names:
                    return False
            elif (error is not None and isinstance(error, entry)) or (
                entry.__name__ in error_type_names
            ):
                return False
        return True


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True, eq=False)
class Run(Command[Any]):
    activity: str
    input: Any = None
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: float | None = None
    idempotency_key: str | None = None
    heartbeat_timeout: float | None = None
    schedule_to_close: float | None = None

    def signature(self) -> str:
        return f"run:{self.activity}"


@dataclass(frozen=True, slots=True, eq=False)
class Sleep(Command[None]):
    seconds: float

    def signature(self) -> str:
        return "sleep"


@dataclass(frozen=True, slots=True, eq=False)
class WaitForSignal(Command[Any]):
    name: str
    timeout: float | None = None

    def signature(self) -> str:
        return f"signal:{self.name}"


@dataclass(frozen=True, slots=True, eq=False)
class All(Command[list[Any]]):
    """Every branch; activity branches run at the same time, at most ``max_concurrency``
    at once (None: up to the engine's ``max_parallel_activities``)."""

    commands: tuple[Command[Any], ...]
    max_concurrency: int | None = None

    def signature(self) -> str:
        return "all(" + ",".join(c.signature() for c in self.commands) + ")"


@dataclass(frozen=True, slots=True, eq=False)
class Map(All):
    """One activity over a list (``ctx.map``): an ``all`` whose signature stays short."""

    activity: str = ""

    def signature(self) -> str:
        return f"map:{self.activity}[{len(self.commands)}]"


@dataclass(frozen=True, slots=True, eq=False)
class Race(Command[tuple[int, Any]]):
    commands: tuple[Command[Any], ...]

    def signature(self) -> str:
        return "race(" + ",".join(c.signature() for c in self.commands) + ")"


ParentClosePolicy = Literal["await", "abandon", "request-cancel"]
PARENT_CLOSE_POLICIES = ("await", "abandon", "request-cancel")


@dataclass(frozen=True, slots=True, eq=False)
class StartChild(Command[Any]):
    """Start a child. ``await`` waits for its result (and cancels it if the parent ends
    first); ``abandon`` and ``request-cancel`` return the child's id once it started, and
    the child outlives the parent or is asked to cancel when the parent ends."""

    workflow_type: str
    input: Any = None
    id: str | None = None
    parent_close_policy: ParentClosePolicy = "await"
    search_attributes: Mapping[str, Any] | None = None
    tags: tuple[str, ...] = ()

    def signature(self) -> str:
        return f"child:{self.workflow_type}"


@dataclass(frozen=True, slots=True, eq=False)
class WaitUntil(Command[bool]):
    """Park until ``predicate()`` holds (re-checked after every update), or the timeout."""

    predicate: Callable[[], bool] = field(repr=False)
    timeout: float | None = None

    def signature(self) -> str:
        return "condition"


@dataclass(frozen=True, slots=True, eq=False)
class GetVersion(Command[int]):
    """Which branch of a code change this run takes; takes no step slot, so adding it to
    code that in-flight runs already passed does not shift their history."""

    change_id: str
    min_supported: int
    max_supported: int

    def signature(self) -> str:
        return f"version:{self.change_id}"


@dataclass(frozen=True, slots=True, eq=False)
class ContinueAsNew(Command[None]):
    """End this run and start the workflow again, same id, fresh history, new ``input``.

    Takes no step slot: it is the run's last command (the engine never sends a value back).
    """

    input: Any = field(repr=False)

    def signature(self) -> str:
        return "continue_as_new"


@dataclass(frozen=True, slots=True, eq=False)
class Record(Command[Any]):
    """A value computed once and recorded (``now``, ``uuid``, ``random``, ``memo``)."""

    name: str
    compute: Callable[[], Any] = field(repr=False)

    def signature(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True, eq=False)
class UpsertSearchAttributes(Command[None]):
    """Set search attributes of the run (checked against its declaration when made)."""

    values: Mapping[str, Any]

    def signature(self) -> str:
        return "upsert_search_attributes:" + ",".join(sorted(self.values))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


Duration = float | int | str | _dt.timedelta
"""Seconds, a ``timedelta`` or a string like ``"5m"``: what ``parse_duration`` reads."""


def parse_duration(value: Duration, what: str = "duration") -> float:
    """Seconds from a number, a ``timedelta``, or a string like ``"500ms"``, ``"5m"``, ``"1d"``.

    A bad value raises ``InvalidArgumentError`` whose ``field`` is ``what``.
    """
    kinds = f"{what} must be seconds, a timedelta or a string like '5m'"
    if isinstance(value, bool):
        raise InvalidArgumentError(kinds, field=what)
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise InvalidArgumentError(
                f"{what} {value!r} is not a duration; use e.g. '500ms', '10s', '5m', '2h', '1d'",
                field=what,
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise InvalidArgumentError(kinds, field=what)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(
            f"{what} must be a finite number >= 0 seconds, got {value!r}", field=what
        )
    return seconds
