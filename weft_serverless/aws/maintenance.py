"""The maintenance handler: an EventBridge schedule calls ``run_maintenance()``.

A schedule fires at most once a minute, so timers would fire up to a minute late. With a
tick (``WEFT_MAINTENANCE_TICK_SECONDS``) one invocation instead runs a pass every tick
until its remaining time falls below a margin, which gives timers second-level precision
for the price of one long-running function. Every step commit is conditional, so a pass that
Lambda stops halfway is simply finished by the next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from weft_serverless import Engine, MaintenanceReport
from weft_serverless.aws.context import LambdaContext
from weft_serverless.aws.logs import get_logger
from weft_serverless.aws.runtime import get_engine, seconds_from_env
from weft_serverless.aws.scope import DEFAULT_STEP_RESERVE, Invocation, lambda_invocation

TICK_ENV = "WEFT_MAINTENANCE_TICK_SECONDS"
MARGIN_ENV = "WEFT_MAINTENANCE_MARGIN_SECONDS"
DEFAULT_MARGIN = 5.0
"""Seconds kept free at the end: the last pass's overrun, the report and the EMF flush."""
MIN_PASS_SECONDS = 1.0
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
    """
    get_logger()  # powertools loads now, in Lambda's init phase, not in the first invocation
    tick = tick_seconds if tick_seconds is not None else seconds_from_env(TICK_ENV, 0.0)
    margin = (
        margin_seconds
        if margin_seconds is not None
        else seconds_from_env(MARGIN_ENV, DEFAULT_MARGIN)
    )

    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        engine = engine_factory()
        correlation = event.get("id") if isinstance(event, dict) else None
        with lambda_invocation(
            engine,
            context,
            handler="maintenance",
            step_reserve=step_reserve,
            correlation_id=correlation if isinstance(correlation, str) else None,
        ) as invocation:
            summary = _run_passes(engine, invocation, tick, margin, sleep, monotonic)
            invocation.logger.info("maintenance done", extra={"maintenance": summary})
        return summary

    return handler


def _run_passes(
    engine: Engine,
    invocation: Invocation,
    tick: float,
    margin: float,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> dict[str, Any]:
    """Run passes every ``tick`` seconds while a whole pass still fits before the margin."""
    summary: dict[str, Any] = {
        "passes": 0,
        "timers_fired": 0,
        "workflows_driven": 0,
        "max_lateness": 0.0,
        "cut_short": False,
        "next_due": None,
    }
    while True:
        started = monotonic()
        budget = max(invocation.time_left() - margin, MIN_PASS_SECONDS)
        report = engine.run_maintenance(budget_seconds=budget)
        _record(invocation, summary, report)
        if tick <= 0:
            return summary
        wait = max(0.0, tick - (monotonic() - started))
        if invocation.time_left() - wait < margin + MIN_PASS_SECONDS:
            return summary
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
