"""One Lambda invocation around the engine: time budget, log keys, metrics, claim release.

``lambda_invocation`` is ``Engine.invocation`` fed from the Lambda context, plus what a
function needs around it: every log line of the invocation carries the correlation id (and
the workflow id once a handler binds it), the engine's counters are flushed as EMF at the
end, and the storage's retries stop before Lambda would kill the invocation.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weft_serverless import Engine
from weft_serverless.aws.context import LambdaContext
from weft_serverless.aws.logs import get_logger
from weft_serverless.aws.metrics import InvocationMetrics, Snapshot, flush

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

DEFAULT_STEP_RESERVE = 2.0
"""Seconds a step must have left to start; an activity's own timeout raises it."""
STORAGE_MARGIN = 0.5
"""Storage retries stop this long before the Lambda deadline, so the handler can answer."""

_cold = threading.Event()


@dataclass
class Invocation:
    """The running invocation, as handlers see it inside ``lambda_invocation``."""

    engine: Engine
    context: LambdaContext
    handler: str
    correlation_id: str
    logger: Logger
    extra: InvocationMetrics = field(default_factory=InvocationMetrics)
    bound: set[str] = field(default_factory=set)

    def time_left(self) -> float:
        """Seconds until Lambda stops this invocation."""
        return self.context.get_remaining_time_in_millis() / 1000.0

    def bind(self, **keys: Any) -> None:
        """Add keys (e.g. ``workflow_id``) to every later log line of this invocation."""
        self.logger.append_keys(**keys)
        self.bound.update(keys)

    def count(self, name: str, value: float = 1) -> None:
        """Add to a Count metric emitted with the engine's counters at the end."""
        self.extra.counts[name] = self.extra.counts.get(name, 0) + value

    def observe_max(self, name: str, seconds: float) -> None:
        """Keep the largest value of a Seconds metric seen during the invocation."""
        self.extra.seconds[name] = max(self.extra.seconds.get(name, 0.0), seconds)


@contextmanager
def lambda_invocation(
    engine: Engine,
    context: LambdaContext,
    *,
    handler: str = "api",
    step_reserve: float = DEFAULT_STEP_RESERVE,
    correlation_id: str | None = None,
    heartbeat: bool = True,
) -> Iterator[Invocation]:
    """Scope one Lambda invocation of ``engine``.

    Inside, no step starts with less than ``step_reserve`` seconds (or the activity's
    timeout) left: its workflow parks behind a timer due now, which the next invocation or
    maintenance pass picks up. On exit the claims of parked workflows are released, the
    counters' deltas are printed as EMF with a ``Handler`` dimension, and the log keys are
    removed so nothing leaks into the container's next invocation.

    Args:
        engine: The container's engine (``get_engine()``).
        context: Lambda's context object, or a ``LocalContext``.
        handler: The ``Handler`` metric dimension (``api``, ``maintenance``).
        step_reserve: Least seconds a step may start with.
        correlation_id: Id for every log line; defaults to the Lambda request id.
        heartbeat: Renew held claims on a thread while the invocation runs.
    """
    logger = get_logger()
    cold_start = not _cold.is_set()
    _cold.set()
    keys = {
        "cold_start": cold_start,
        "function_name": context.function_name,
        "function_memory_size": context.memory_limit_in_mb,
        "function_arn": context.invoked_function_arn,
        "function_request_id": context.aws_request_id,
    }
    logger.append_keys(**keys)
    invocation = Invocation(
        engine, context, handler, correlation_id or context.aws_request_id, logger
    )
    logger.set_correlation_id(invocation.correlation_id)
    before = Snapshot.of(engine)
    storage = engine.runtime.storage
    budgeted = hasattr(storage, "time_budget")
    previous_budget = getattr(storage, "time_budget", None)
    if budgeted:
        storage.time_budget = lambda: invocation.time_left() - STORAGE_MARGIN  # type: ignore[attr-defined]
    try:
        with engine.invocation(
            time_left=invocation.time_left, step_reserve=step_reserve, heartbeat=heartbeat
        ):
            yield invocation
    finally:
        if budgeted:
            storage.time_budget = previous_budget  # type: ignore[attr-defined]
        values = InvocationMetrics.between(before, Snapshot.of(engine))
        values.counts.update(invocation.extra.counts)
        values.seconds.update(invocation.extra.seconds)
        try:
            flush(values, handler)
        except Exception:
            logger.exception("could not emit the invocation's metrics")
        logger.remove_keys([*keys, *invocation.bound])
        logger.set_correlation_id(None)
