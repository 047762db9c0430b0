"""The maintenance handler: an EventBridge schedule calls ``run_maintenance()``.

A schedule fires at most once a minute, so timers would fire up to a minute late. With a
tick (``WEFT_MAINTENANCE_TICK_SECONDS``) one invocation instead runs a pass every tick
until its remaining time falls below a margin, which gives timers second-level precision
for the price of one long-running function. Every step commit is conditional, so a pass that
Lambda stops halfway is simply finished by the next one.

Firing scales out two ways (ADR 0055): the schedule invokes several workers per tick, each
told its share in the event (``{"worker": i, "workers": W}``: the shards ``s % W == i``), and
each worker fires up to ``WEFT_MAINTENANCE_PARALLEL_FIRES`` runs at once on threads, since a
fire spends its time waiting on DynamoDB.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from weft_serverless import ConfigurationError, Engine, MaintenanceReport
from weft_serverless.aws.context import LambdaContext
from weft_serverless.aws.logs import get_logger
from weft_serverless.aws.runtime import get_engine, seconds_from_env
from weft_serverless.aws.scope import DEFAULT_STEP_RESERVE, Invocation, lambda_invocation

TICK_ENV = "WEFT_MAINTENANCE_TICK_SECONDS"
MARGIN_ENV = "WEFT_MAINTENANCE_MARGIN_SECONDS"
PARALLEL_ENV = "WEFT_MAINTENANCE_PARALLEL_FIRES"
DEFAULT_PARALLEL_FIRES = 16
"""Runs one worker fires at once; measured by ``bench/firing_workers.py`` (ADR 0055)."""
DEFAULT_MARGIN = 5.0
"""Seconds kept free at the end: the last pass's overrun, the report and the EMF flush."""
MIN_PASS_SECONDS = 1.0
MAX_WORKERS = 256
"""As many workers as an index may have shards: a worker beyond that would read nothing."""
"""A pass is only started with at least this much budget beyond the margin."""

MaintenanceHandler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


def make_maintenance_handler(
    *,
    engine_factory: Callable[[], Engine] = get_engine,
    tick_seconds: float | None = None,
    margin_seconds: float | None = None,
    step_reserve: float = DEFAULT_STEP_RESERVE,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    parallel_fires: int | None = None,
) -> MaintenanceHandler:
    """Build the Lambda handler for the maintenance schedule.

    Args:
        engine_factory: Returns the container's engine.
        tick_seconds: Seconds between passes inside one invocation; 0 runs one pass.
            Defaults to ``WEFT_MAINTENANCE_TICK_SECONDS`` (0).
        margin_seconds: Time left unused at the end; ``WEFT_MAINTENANCE_MARGIN_SECONDS`` (5).
        step_reserve: Least seconds a step driven by a pass may start with.
        sleep: Waits between passes (injectable so tests never sleep).
        monotonic: Clock that paces the passes.
        parallel_fires: Runs fired at once by each pass; ``WEFT_MAINTENANCE_PARALLEL_FIRES``
            (16).

    The event may carry the worker's share, ``{"worker": i, "workers": W}`` (default: the
    one worker, every shard); a malformed share is refused before anything is read.
    """
    get_logger()  # powertools loads now, in Lambda's init phase, not in the first invocation
    tick = tick_seconds if tick_seconds is not None else seconds_from_env(TICK_ENV, 0.0)
    margin = (
        margin_seconds
        if margin_seconds is not None
        else seconds_from_env(MARGIN_ENV, DEFAULT_MARGIN)
    )

    parallel = parallel_fires if parallel_fires is not None else _count_from_env(PARALLEL_ENV)

    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        share = _share_of(event)
        engine = engine_factory()
        correlation = event.get("id") if isinstance(event, dict) else None
        with lambda_invocation(
            engine,
            context,
            handler="maintenance",
            step_reserve=step_reserve,
            correlation_id=correlation if isinstance(correlation, str) else None,
        ) as invocation:
            summary = _run_passes(
                engine, invocation, Pacing(tick, margin, share, parallel), sleep, monotonic
            )
            invocation.logger.info("maintenance done", extra={"maintenance": summary})
        return summary

    return handler


@dataclass(frozen=True)
class Pacing:
    """How one invocation runs its passes: every ``tick`` seconds (0: once) until ``margin``
    seconds are left, over ``share`` (worker, workers), ``parallel`` fires at once."""

    tick: float
    margin: float
    share: tuple[int, int] = (0, 1)
    parallel: int = DEFAULT_PARALLEL_FIRES


def _share_of(event: object) -> tuple[int, int]:
    """The worker's share from a scheduled event's input; the whole store if it has none."""
    if not isinstance(event, dict) or ("worker" not in event and "workers" not in event):
        return 0, 1
    worker, workers = event.get("worker", 0), event.get("workers", 1)
    valid = all(isinstance(n, int) and not isinstance(n, bool) for n in (worker, workers))
    if not valid or not 1 <= workers <= MAX_WORKERS or not 0 <= worker < workers:
        raise ConfigurationError(
            f"the maintenance event's share must be 0 <= worker < workers <= {MAX_WORKERS}, "
            f"got worker={worker!r}, workers={workers!r}"
        )
    return worker, workers


def _count_from_env(name: str) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return DEFAULT_PARALLEL_FIRES
    if not text.isdigit() or int(text) < 1:
        raise ConfigurationError(f"{name} must be a whole number of at least 1, got {text!r}")
    return int(text)


def _run_passes(
    engine: Engine,
    invocation: Invocation,
    pacing: Pacing,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> dict[str, Any]:
    """Run passes every tick (at once after a pass that left a backlog) while a whole pass
    still fits before the margin."""
    tick, margin = pacing.tick, pacing.margin
    summary: dict[str, Any] = {
        "passes": 0,
        "timers_fired": 0,
        "workflows_driven": 0,
        "max_lateness": 0.0,
        "cut_short": False,
        "next_due": None,
        "worker": pacing.share[0],
        "workers": pacing.share[1],
    }
    while True:
        started = monotonic()
        budget = max(invocation.time_left() - margin, MIN_PASS_SECONDS)
        report = engine.run_maintenance(
            budget_seconds=budget,
            worker=pacing.share[0],
            workers=pacing.share[1],
            parallel_fires=pacing.parallel,
        )
        _record(invocation, summary, report)
        # A pass that fired its cap of timers left a backlog: the next one starts at once,
        # so a worker fires for as long as its invocation lasts, not one cap a tick.
        backlog = report.cut_short and report.timers_fired > 0
        if tick <= 0 and not backlog:
            return summary
        wait = 0.0 if backlog else max(0.0, tick - (monotonic() - started))
        if invocation.time_left() - wait < margin + MIN_PASS_SECONDS:
            return summary
        if not backlog:
            sleep(wait)


def _record(invocation: Invocation, summary: dict[str, Any], report: MaintenanceReport) -> None:
    summary["passes"] += 1
    summary["timers_fired"] += report.timers_fired
    summary["workflows_driven"] += report.workflows_driven
    summary["max_lateness"] = max(summary["max_lateness"], report.max_lateness)
    summary["cut_short"] = summary["cut_short"] or report.cut_short
    summary["next_due"] = report.next_due
    invocation.count("MaintenancePasses")
    if report.timers_fired:
        invocation.observe_max("TimerLatenessMax", report.max_lateness)
    busy = report.timers_fired or report.workflows_driven or any(report.parts.values())
    log = invocation.logger.info if busy or report.cut_short else invocation.logger.debug
    log("maintenance pass", extra={"report": report.as_dict()})
