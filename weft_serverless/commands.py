"""The durable operations a workflow yields.

A command is inert data: the driver decides, from the op log, whether to answer it from
history or to carry it out. Each works as ``x = yield cmd`` and as ``x = yield from cmd``
(the second lets a type checker infer ``x``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from weft_serverless.errors import InvalidArgumentError, UnknownServiceError
from weft_serverless.time_values import Duration, parse_duration

__all__ = ["Duration", "parse_duration"]  # read here by the context, config and schedules

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
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidArgumentError(
                f"max_attempts must be a whole number >= 1, got {attempts!r}", "max_attempts"
            )
        for name in ("initial_backoff", "max_backoff"):
            object.__setattr__(self, name, parse_duration(getattr(self, name), name))
        multiplier = self.backoff_multiplier
        factor = math.nan
        if isinstance(multiplier, int | float) and not isinstance(multiplier, bool):
            try:
                factor = float(multiplier)  # float powers: an int one could grow without end
            except OverflowError:
                factor = math.inf
        if not 1 <= factor < math.inf:
            raise InvalidArgumentError(
                f"backoff_multiplier must be a finite number >= 1, got {multiplier!r}",
                "backoff_multiplier",
            )
        object.__setattr__(self, "backoff_multiplier", factor)

    def backoff(self, failed_attempt: int) -> float:
        """Seconds to wait after attempt number ``failed_attempt`` (1-based) failed: never
        more than ``max_backoff``, however large the power grows."""
        try:
            delay = self.initial_backoff * self.backoff_multiplier ** (failed_attempt - 1)
        except OverflowError:  # float ** raises instead of reaching infinity
            return float(self.max_backoff)
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
