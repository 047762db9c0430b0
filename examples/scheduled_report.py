"""A nightly report: a cron schedule starts one run per night, in the report's time zone.

What it shows: ``engine.schedule`` with a cron expression and a time zone (02:00 in Berlin,
which is 01:00 UTC in winter and 00:00 UTC in summer), ``overlap="skip"`` so a slow report
never runs twice at once, and a ``catchup_window`` so that after an outage only the most
recent missed night runs. The schedule costs nothing between nights: its next fire is one
stored timer the maintenance tick reads only once it is due. Each run's id is the schedule id
and the fire's UTC time (``nightly-report-20260102T010000Z``), so two engines on the same
tick start it once, and the report activity can use it as an idempotency key.

``ensure_schedule(engine)`` creates the schedule once (a deploy step, or at cold start); on
later calls it returns the one that exists.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from weft_serverless import (
    Engine,
    ScheduleAlreadyExistsError,
    ScheduleHandle,
    WorkflowContext,
    workflow,
)

SCHEDULE_ID = "nightly-report"


def build_report(request: dict[str, Any]) -> dict[str, Any]:
    """Build and send one region's report; ``report_id`` (the run's id) names it once."""
    print(f"  [report]    {request['report_id']} for {request['region']}")
    return {"report_id": request["report_id"], "rows": 42}


def scheduled_report(
    ctx: WorkflowContext, request: dict[str, Any]
) -> Generator[Any, Any, dict[str, Any]]:
    """One night's report, for the region the schedule's input names."""
    report = yield ctx.run(
        build_report, {"report_id": ctx.workflow_id, "region": request["region"]}
    )
    return {"region": request["region"], **report}


report_workflow = (
    workflow("scheduled_report", version="1")
    .activities(build_report=build_report)
    .execute(scheduled_report)
)

workflows = {"scheduled_report": report_workflow}

SAMPLE_INPUT: dict[str, Any] = {"region": "eu"}


def ensure_schedule(engine: Engine) -> ScheduleHandle:
    """The nightly schedule, created on the first call."""
    try:
        return engine.schedule(
            SCHEDULE_ID,
            "scheduled_report",
            input=SAMPLE_INPUT,
            cron="0 2 * * *",
            timezone="Europe/Berlin",
            overlap="skip",
            catchup_window="30m",
        )
    except ScheduleAlreadyExistsError:
        return engine.get_schedule(SCHEDULE_ID)
