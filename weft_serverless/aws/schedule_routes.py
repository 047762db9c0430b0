"""The HTTP routes of schedules (create, list, describe, delete, pause, resume, trigger,
backfill): part of the one route table."""

from __future__ import annotations

from weft_serverless.aws.route_types import OVERLAPS, Field, Route
from weft_serverless.aws.schemas import ANY, INSTANT, NAME, SCHEDULE_ID, duration

SCHEDULE_ROUTES: tuple[Route, ...] = (
    Route(
        "create_schedule",
        "POST",
        "/schedules",
        "Create a cron or interval schedule that starts runs of one workflow type.",
        (201,),
        "Schedule",
        body=(
            Field(
                "schedule_id", SCHEDULE_ID, "The schedule's id; its runs' ids add the time.", True
            ),
            Field("workflow_type", NAME, "Registered type.", True),
            Field("input", ANY, "Every run's input."),
            Field("cron", {"type": "string", "minLength": 1}, "A cron expression (or every)."),
            Field("every", duration(1), "A fixed interval of at least 1 s (or cron)."),
            Field("timezone", {"type": "string", "minLength": 1}, "IANA name (default UTC)."),
            Field("overlap", {"type": "string", "enum": list(OVERLAPS)}, "Default skip."),
            Field(
                "catchup_window",
                duration(0, exclusive=True),
                "A fire found later than this is missed.",
            ),
            Field("jitter", duration(), "Delay each fire by a deterministic offset below this."),
            Field("start_at", INSTANT, "No fire before this time."),
            Field("end_at", INSTANT, "No fire after this time (not before start_at)."),
        ),
        errors=(400, 409, 413, 500, 503),
        payload_field="input",
        body_rules={"oneOf": [{"required": ["cron"]}, {"required": ["every"]}]},
    ),
    Route(
        "list_schedules",
        "GET",
        "/schedules",
        "Every schedule, in id order.",
        (200,),
        "SchedulePage",
        errors=(400, 500, 503),
    ),
    Route(
        "describe_schedule",
        "GET",
        "/schedules/{schedule_id}",
        "A schedule's definition, next fire, counters and running runs.",
        (200,),
        "Schedule",
    ),
    Route(
        "delete_schedule",
        "DELETE",
        "/schedules/{schedule_id}",
        "Delete a schedule; the runs it started go on.",
        (200,),
        "ScheduleDeleted",
        errors=(400, 404, 500, 503),
    ),
    *(
        Route(
            f"{action}_schedule",
            "POST",
            f"/schedules/{{schedule_id}}/{action}",
            summary,
            (200,),
            "ScheduleFired" if action == "trigger" else "Schedule",
            body=(),
            # trigger: 409 once every manual run id of the second is taken (WorkflowBusyError)
            errors=(400, 404, 409, 500, 503) if action == "trigger" else (400, 404, 500, 503),
        )
        for action, summary in (
            ("pause", "Stop firing until resumed."),
            ("resume", "Fire again from the first fire after now."),
            ("trigger", "Fire now; the overlap policy applies."),
        )
    ),
    Route(
        "backfill_schedule",
        "POST",
        "/schedules/{schedule_id}/backfill",
        "Start the fires of a past interval, oldest first; the overlap policy applies.",
        (200,),
        "ScheduleBackfilled",
        body=(
            Field("start", INSTANT, "From this time.", True),
            Field("end", INSTANT, "To this time (not before start, at most now).", True),
        ),
        errors=(400, 404, 500, 503),
    ),
)
