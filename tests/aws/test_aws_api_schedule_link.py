"""A run says which schedule started it (``schedule_id``), so an operator can go from the
run to the schedule; a run started otherwise says null."""

from __future__ import annotations

from typing import Any

from aws_support import Api

from weft_serverless import Engine
from weft_serverless.testing import VirtualClock


def test_a_run_names_the_schedule_that_started_it(
    api: Api, engine: Engine, clock: VirtualClock, maintenance: Any
) -> None:
    body = {"schedule_id": "hourly", "workflow_type": "greeter", "every": "1h", "input": "ada"}
    assert api("POST", "/schedules", body).status == 201
    triggered = api("POST", "/schedules/hourly/trigger", {}).body["workflow_id"]
    assert api("GET", f"/workflows/{triggered}").body["schedule_id"] == "hourly"
    clock.advance(3601)
    maintenance({"id": "tick"}, api.context())
    fired = [row.id for row in engine.list(workflow_type="greeter") if row.id != triggered]
    assert fired and api("GET", f"/workflows/{fired[0]}").body["schedule_id"] == "hourly"
    assert engine.describe(fired[0]).schedule_id == "hourly"
    plain = api("POST", "/workflows", {"workflow_type": "greeter", "input": "bo"}).body
    assert plain["schedule_id"] is None
