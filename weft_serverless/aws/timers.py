"""The timer hint worker: an SQS event source mapping delivers hints, this fires them.

Each SQS message names one timer key (``weft_serverless.hint_ports``). Hints are fired per
run, so one run whose firing raises fails only its own messages: the handler answers with
``batchItemFailures`` (the mapping's ``ReportBatchItemFailures``) and SQS redelivers those
alone; a message that names no timer key fails every time and ends in the dead-letter
queue. Timers not due yet are sent again by the engine with the delay left; timers of a run
held elsewhere, or that failed to fire, stay stored for the maintenance sweep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from weft_serverless import Engine, TimerHint, WeftError
from weft_serverless.aws.context import LambdaContext
from weft_serverless.aws.logs import get_logger
from weft_serverless.aws.runtime import get_engine
from weft_serverless.aws.scope import DEFAULT_STEP_RESERVE, Invocation, lambda_invocation
from weft_serverless.hint_ports import hint_from_body

TimerHintHandler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


def make_timer_hint_handler(
    *,
    engine_factory: Callable[[], Engine] = get_engine,
    step_reserve: float = DEFAULT_STEP_RESERVE,
    wait: Callable[[float], None] = time.sleep,
) -> TimerHintHandler:
    """Build the Lambda handler for the timer hint queue.

    Args:
        engine_factory: Returns the container's engine (built with the queue as its port).
        step_reserve: Least seconds a step driven by a hint may start with.
        wait: Waits for a timer due within a second (injectable so tests never sleep).
    """
    get_logger()

    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        engine = engine_factory()
        records = event.get("Records") if isinstance(event, dict) else None
        with lambda_invocation(
            engine, context, handler="timers", step_reserve=step_reserve
        ) as invocation:
            failures = _fire(engine, invocation, records if isinstance(records, list) else [], wait)
        return {"batchItemFailures": [{"itemIdentifier": m} for m in failures]}

    return handler


def _fire(
    engine: Engine,
    invocation: Invocation,
    records: list[Any],
    wait: Callable[[float], None],
) -> list[str]:
    """Fire the hints of ``records`` run by run; the message ids that failed."""
    failures: list[str] = []
    by_run: dict[str, list[tuple[str, TimerHint]]] = {}
    for record in records:
        message_id = str(record.get("messageId", "")) if isinstance(record, dict) else ""
        try:
            hint = hint_from_body(str(record.get("body", "")))
        except (WeftError, AttributeError) as exc:
            invocation.logger.error("timer hint refused", extra={"error": str(exc)})
            invocation.count("TimerHintsRefused")
            failures.append(message_id)
            continue
        by_run.setdefault(hint.workflow_id, []).append((message_id, hint))
    for workflow_id, hints in by_run.items():
        try:
            report = engine.fire_timer_hints([hint for _, hint in hints], wait=wait)
        except Exception:
            invocation.logger.exception("timer hints failed", extra={"workflow_id": workflow_id})
            failures += [message_id for message_id, _ in hints]
            continue
        invocation.count("TimerHintsFired", len(report.fired))
        invocation.count("TimerHintsAbsent", len(report.absent))
        invocation.count("TimerHintsResent", len(report.resend))
        if report.fired:
            invocation.observe_max("TimerHintLatenessMax", report.max_lateness)
    return failures
