"""What each schedule route does, given a validated request (see ``operations``)."""

from __future__ import annotations

from typing import Any

from weft_serverless import ScheduleDescription
from weft_serverless.aws.operations import Reply, Request, _instant


def schedule_json(description: ScheduleDescription) -> dict[str, Any]:
    """The ``Schedule`` object of the API."""
    return {
        "id": description.id,
        "workflow_type": description.workflow_type,
        "cron": description.cron,
        "every": description.every,
        "timezone": description.timezone,
        "overlap": description.overlap,
        "paused": description.paused,
        "next_fire_at": description.next_fire_at,
        "last_fire_at": description.last_fire_at,
        "fired": description.fired,
        "missed": description.missed,
        "skipped": description.skipped,
        "running": list(description.running),
        "catchup_window": description.catchup_window,
        "jitter": description.jitter,
        "start_at": description.start_at,
        "end_at": description.end_at,
        "queued_fire_at": description.queued_fire_at,
        "input": description.input,
    }


def create_schedule(request: Request) -> Reply:
    body = request.body
    options = {
        name: body[name]
        for name in ("cron", "every", "timezone", "overlap", "catchup_window", "jitter")
        if name in body
    }
    handle = request.engine.schedule(
        body["schedule_id"],
        body["workflow_type"],
        body.get("input"),
        start_at=_instant(body.get("start_at"), "start_at"),
        end_at=_instant(body.get("end_at"), "end_at"),
        **options,
    )
    return 201, schedule_json(handle.describe())


def list_schedules(request: Request) -> Reply:
    return 200, {"items": [schedule_json(d) for d in request.engine.list_schedules()]}


def describe_schedule(request: Request) -> Reply:
    handle = request.engine.get_schedule(request.params["schedule_id"])
    return 200, schedule_json(handle.describe())


def delete_schedule(request: Request) -> Reply:
    request.engine.get_schedule(request.params["schedule_id"]).delete()
    return 200, {"id": request.params["schedule_id"], "deleted": True}


def pause_schedule(request: Request) -> Reply:
    request.engine.get_schedule(request.params["schedule_id"]).pause()
    return describe_schedule(request)


def resume_schedule(request: Request) -> Reply:
    request.engine.get_schedule(request.params["schedule_id"]).resume()
    return describe_schedule(request)


def trigger_schedule(request: Request) -> Reply:
    handle = request.engine.get_schedule(request.params["schedule_id"])
    run = handle.trigger()
    described = schedule_json(handle.describe())
    return 200, {"schedule": described, "workflow_id": None if run is None else run.id}


def backfill_schedule(request: Request) -> Reply:
    handle = request.engine.get_schedule(request.params["schedule_id"])
    start = _instant(request.body["start"], "start")
    end = _instant(request.body["end"], "end")
    assert start is not None and end is not None  # required fields
    runs = handle.backfill(start, end)
    return 200, {"id": handle.id, "workflow_ids": [run.id for run in runs]}
