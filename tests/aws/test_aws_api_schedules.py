"""The schedule routes on moto DynamoDB, through the REST proxy events API Gateway sends:
create, list, show, pause, resume, trigger, backfill, delete, and their errors."""

from __future__ import annotations

from typing import Any

from aws_support import Api

from weft_serverless.testing import VirtualClock

T0 = 1_767_225_600.0  # VirtualClock's default start: 2026-01-01T00:00:00Z


def test_a_schedule_through_its_routes(api: Api, clock: VirtualClock, maintenance: Any) -> None:
    created = api(
        "POST",
        "/schedules",
        {
            "schedule_id": "greet",
            "workflow_type": "greeter",
            "input": "ada",
            "every": "15m",
            "overlap": "allow",
        },
    )
    assert created.status == 201
    assert created.body["next_fire_at"] == T0 + 900
    assert created.body["overlap"] == "allow"

    clock.advance(900)
    maintenance({"id": "tick"}, api.context())
    run = api("GET", "/workflows/greet-20260101T001500Z")
    assert run.body["status"] == "completed"

    shown = api("GET", "/schedules/greet").body
    assert (shown["fired"], shown["last_fire_at"], shown["running"]) == (1, T0 + 900, [])
    assert [item["id"] for item in api("GET", "/schedules").body["items"]] == ["greet"]

    paused = api("POST", "/schedules/greet/pause")
    assert (paused.status, paused.body["paused"], paused.body["next_fire_at"]) == (200, True, None)
    resumed = api("POST", "/schedules/greet/resume").body
    assert (resumed["paused"], resumed["next_fire_at"]) == (False, T0 + 1800)

    clock.advance(30)
    fired = api("POST", "/schedules/greet/trigger").body
    assert fired["workflow_id"] == "greet-20260101T001530a"  # a manual fire's own id
    assert fired["schedule"]["fired"] == 2

    backfilled = api(
        "POST", "/schedules/greet/backfill", {"start": T0 - 1800, "end": "2026-01-01T00:00:00Z"}
    ).body
    assert backfilled["workflow_ids"] == [
        "greet-20251231T233000Z",
        "greet-20251231T234500Z",
        "greet-20260101T000000Z",
    ]

    deleted = api("DELETE", "/schedules/greet")
    assert (deleted.status, deleted.body) == (200, {"id": "greet", "deleted": True})
    assert api("GET", "/schedules/greet").code == "ScheduleNotFoundError"


def test_schedule_errors_have_their_statuses_and_name_the_field(api: Api) -> None:
    body = {"schedule_id": "s", "workflow_type": "greeter", "cron": "61 * * * *"}
    bad = api("POST", "/schedules", body)
    assert (bad.status, bad.code, bad.body["field"]) == (400, "InvalidScheduleError", "cron")
    both = api("POST", "/schedules", {**body, "cron": "0 * * * *", "every": 60})
    assert (both.status, both.body["field"]) == (400, "cron")
    zone = api("POST", "/schedules", {**body, "cron": "0 * * * *", "timezone": "Nowhere/Land"})
    assert (zone.status, zone.body["field"]) == (400, "timezone")
    overlap = api("POST", "/schedules", {**body, "cron": "0 * * * *", "overlap": "never"})
    assert (overlap.status, overlap.body["field"]) == (400, "overlap")
    assert api("GET", "/schedules").body["items"] == []

    assert api("POST", "/schedules", {**body, "cron": "0 * * * *"}).status == 201
    again = api("POST", "/schedules", {**body, "cron": "0 * * * *"})
    assert (again.status, again.code) == (409, "ScheduleAlreadyExistsError")
    missing = api("POST", "/schedules/nope/pause")
    assert (missing.status, missing.code) == (404, "ScheduleNotFoundError")
