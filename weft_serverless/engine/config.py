"""Every check of what callers pass to the engine, in one place, raised before any write.

``Engine.create`` options raise ``ConfigurationError``; per-call arguments raise
``InvalidArgumentError`` naming the argument. Identifier limits (UTF-8 bytes) and their
checks live in ``weft_serverless.identifiers``, and the duration and instant checks with
their bounds in ``weft_serverless.time_values``, below the engine, because the workflow
context, activity tokens and retry policies check them too; engine modules take them from
here.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weft_serverless.engine.ownership import Timing
from weft_serverless.engine.persistence.records import STATUSES, TERMINAL
from weft_serverless.engine.process.activity_threads import MAX_PARALLEL_LIMIT
from weft_serverless.engine.process.services import ServiceFactory
from weft_serverless.engine.process.timer_hints import TimerHints
from weft_serverless.errors import ConfigurationError, InvalidArgumentError, MissingServiceError
from weft_serverless.event_sink import EventSink
from weft_serverless.identifiers import (
    MAX_WORKFLOW_ID_BYTES,
    check_dedup_id,
    check_idempotency_key,
    check_name,
    check_text,
    check_workflow_id,
)
from weft_serverless.time_values import Duration, parse_duration, parse_instant
from weft_serverless.workflow import WorkflowDefinition

if TYPE_CHECKING:
    from weft_serverless.engine.process.tracing import Tracing

__all__ = [
    "DEFAULT_MAX_CLOCK_SKEW",
    "MAX_PAGE",
    "MAX_WORKFLOW_ID_BYTES",
    "Duration",
    "StartOptions",
    "check_dedup_id",
    "check_engine_options",
    "check_id",
    "check_name",
    "check_page",
    "check_registry",
    "check_services",
    "check_text",
    "clock_skew_limit",
    "parse_duration",
    "parse_instant",
    "parse_retention",
    "start_options",
]

DEFAULT_MAX_CLOCK_SKEW = 5.0
"""Seconds; used when the ownership mode has no renew interval to default to."""
MAX_PAGE = 1000
"""The most rows one list page returns."""


# -- Engine.create -------------------------------------------------------------------------


def check_registry(workflows: Mapping[str, WorkflowDefinition]) -> None:
    if not isinstance(workflows, Mapping):
        raise ConfigurationError("workflows must be a mapping of name to workflow definition")
    for name, definition in workflows.items():
        if not isinstance(definition, WorkflowDefinition):
            raise ConfigurationError(
                f"workflows[{name!r}] is {type(definition).__name__}, not a WorkflowDefinition; "
                "build it with workflow(name).activities(...).execute(fn)"
            )
        if definition.name != name:
            raise ConfigurationError(
                f"workflows[{name!r}] holds the definition named {definition.name!r}; "
                "the key must equal the definition's name"
            )


def check_services(
    factory: object, workflows: Mapping[str, WorkflowDefinition]
) -> ServiceFactory | None:
    """The services factory is callable (it is not called: services are built lazily; a
    non-callable is an ``InvalidArgumentError`` naming the field, as in ``activity()``);
    with none, no registered activity may declare a service (``MissingServiceError``)."""
    if factory is None:
        for name, definition in workflows.items():
            for activity_name, activity in definition.activities.items():
                if activity.services:
                    raise MissingServiceError(name, activity_name, activity.services[0])
        return None
    if not callable(factory):
        raise InvalidArgumentError(
            "services must be a zero-argument callable returning a mapping of names to "
            f"clients, e.g. services=lambda: {{'s3': boto3.client('s3')}}; got {factory!r}",
            "services",
        )
    return factory


def check_event_sink(sink: object) -> EventSink | None:
    """The ``events`` option is None or an ``EventSink`` (``EventBridgeSink``, or any object
    with ``publish``, ``size_of``, ``max_batch`` and ``max_bytes``)."""
    if sink is None or isinstance(sink, EventSink):
        return sink
    raise InvalidArgumentError(
        f"events must be an event sink such as EventBridgeSink('my-bus'), got {sink!r}",
        "events",
    )


def check_tracer(tracer: object) -> Tracing | None:
    """The engine's view of ``tracer`` (``tracing.adapt``); the tracing module, and any
    tracing library, is imported only when one is given."""
    if tracer is None:
        return None
    from weft_serverless.engine.process.tracing import adapt

    return adapt(tracer)


def check_timer_hints(port: object) -> TimerHints | None:
    """The engine's hint port (ADR 0054): something with ``send`` and a positive ``horizon``."""
    if port is None:
        return None
    horizon = getattr(port, "horizon", None)
    if not isinstance(port, TimerHints) or not isinstance(horizon, (int, float)) or horizon <= 0:
        raise ConfigurationError(
            "timer_hints must have send(hints) and a positive horizon in seconds"
        )
    return port


def check_engine_options(
    ownership: object,
    background_tasks: object,
    lease_timing: Timing,
    claim_timing: Timing,
    max_payload_bytes: int | None,
) -> float | None:
    """The modes are known ones, the chosen mode's timing holds, a payload cap is positive.

    Returns the chosen mode's renew interval (None for mode ``none``): the default bound on
    clock skew.
    """
    if background_tasks not in ("manual", "automatic"):
        raise ConfigurationError(
            f"background_tasks must be 'manual' or 'automatic', got {background_tasks!r}"
        )
    if ownership not in ("none", "lease", "workflow-lease"):
        raise ConfigurationError(
            f"ownership must be 'none', 'lease' or 'workflow-lease', got {ownership!r}"
        )
    if ownership == "lease":
        lease_timing.check("lease")
    elif ownership == "workflow-lease":
        claim_timing.check("workflow claim")
    if max_payload_bytes is not None and max_payload_bytes <= 0:
        raise ConfigurationError("max_payload_bytes must be a positive number of bytes")
    timing = {"lease": lease_timing, "workflow-lease": claim_timing}.get(str(ownership))
    return None if timing is None else timing.renew_interval


def check_parallel_activities(value: object) -> int:
    """``max_parallel_activities``: a whole number from 0 (branches one after another, on the
    drive's thread) to ``MAX_PARALLEL_LIMIT``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_PARALLEL_LIMIT
    ):
        raise ConfigurationError(
            f"max_parallel_activities must be a whole number from 0 to {MAX_PARALLEL_LIMIT}, "
            f"got {value!r}"
        )
    return value


def parse_retention(retention: Mapping[str, object] | None) -> dict[str, float]:
    """``{"completed": "7d", "failed": "30d", ...}`` -> seconds per terminal status."""
    if retention is None:
        return {}
    if not isinstance(retention, Mapping):
        raise ConfigurationError("retention must map a terminal status to a duration")
    windows: dict[str, float] = {}
    for status, window in retention.items():
        if status not in TERMINAL:
            raise ConfigurationError(
                f"retention key {status!r} is not a terminal status ({', '.join(sorted(TERMINAL))})"
            )
        try:
            seconds = parse_duration(window, f"retention[{status!r}]")  # type: ignore[arg-type]
        except InvalidArgumentError as exc:
            raise ConfigurationError(str(exc)) from None
        if seconds <= 0:
            raise ConfigurationError(f"retention[{status!r}] must be > 0 seconds")
        windows[status] = seconds
    return windows


def clock_skew_limit(configured: object, renew_interval: float | None) -> float | None:
    """The checked ``max_clock_skew``: seconds, or ``None`` when the check is off (inf)."""
    if configured is None:
        return renew_interval or DEFAULT_MAX_CLOCK_SKEW
    if isinstance(configured, bool) or not isinstance(configured, int | float):
        raise ConfigurationError(f"max_clock_skew must be seconds (a number), got {configured!r}")
    if math.isnan(configured) or configured <= 0:
        raise ConfigurationError(f"max_clock_skew must be > 0 seconds, got {configured!r}")
    return None if math.isinf(configured) else float(configured)


# -- per-call arguments ----------------------------------------------------------------------


def check_positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{field} must be a whole number of at least 1", field)
    return value


MAX_WORKERS = 256
"""Maintenance workers one store can be split between: no index has more shards."""


def check_share(worker: Any, workers: Any) -> tuple[int, int]:
    """A maintenance worker's share: ``worker`` of ``workers`` (shards ``s % workers ==
    worker``)."""
    count = check_positive_int(workers, "workers")
    if count > MAX_WORKERS:
        raise InvalidArgumentError(f"workers must be at most {MAX_WORKERS}", "workers")
    if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < count:
        raise InvalidArgumentError(
            f"worker must be a whole number from 0 to workers - 1 ({count - 1})", "worker"
        )
    return worker, count


def check_id(workflow_id: Any, field: str = "workflow_id") -> str:
    return check_workflow_id(workflow_id, field)


@dataclass(frozen=True, slots=True)
class StartOptions:
    """A start's checked options: when it may begin and how long it may run (seconds)."""

    idempotency_key: str | None
    start_at: float | None
    execution_timeout: float | None


def start_options(
    now: float,
    idempotency_key: str | None,
    execution_timeout: Duration | None,
    start_at: float | datetime.datetime | None,
    start_after: Duration | None,
) -> StartOptions:
    if idempotency_key is not None:
        check_idempotency_key(idempotency_key)
    if start_at is not None and start_after is not None:
        raise InvalidArgumentError("pass start_at or start_after, not both", "start_after")
    due = _start_time(now, start_at, start_after)
    timeout = None
    if execution_timeout is not None:
        timeout = parse_duration(execution_timeout, "execution_timeout")
        if timeout <= 0:
            raise InvalidArgumentError("execution_timeout must be > 0 seconds", "execution_timeout")
    return StartOptions(idempotency_key, due, timeout)


def _start_time(
    now: float, start_at: float | datetime.datetime | None, start_after: Duration | None
) -> float | None:
    if start_after is not None:
        return now + parse_duration(start_after, "start_after")
    return None if start_at is None else parse_instant(start_at, "start_at")


def check_page(status: str | None, limit: int, cursor: str | None) -> None:
    """A list page's filters: a known status, a limit in range, a cursor we handed out."""
    if status is not None and status not in STATUSES:
        raise InvalidArgumentError(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an integer from 1 to {MAX_PAGE}")
    if cursor is not None and (not isinstance(cursor, str) or "#" not in cursor):
        raise InvalidArgumentError("cursor is not one this engine returned")
