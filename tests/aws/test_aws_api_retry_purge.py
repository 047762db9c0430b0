"""The retry and purge routes, and ``calls.call``: the one path the API, CLI and console share."""

from __future__ import annotations

import aws_flows
import pytest
from aws_support import Api

from weft_serverless import Engine
from weft_serverless.aws.calls import ROUTE_OF, call
from weft_serverless.aws.responses import ApiError, error_of
from weft_serverless.aws.routes import ROUTES


def test_retry_runs_a_failed_workflow_again_from_its_failed_step(api: Api) -> None:
    assert api("POST", "/workflows", {"workflow_type": "failing", "id": "f"}).status == 201
    assert api("GET", "/workflows/f").body["status"] == "failed"
    assert aws_flows.CALLS["explode"] == 1

    retried = api("POST", "/workflows/f/retry")

    assert retried.status == 200
    assert aws_flows.CALLS["explode"] == 2  # the failed step ran again, inline
    assert retried.body["status"] == "failed"  # and failed again: explode always raises


def test_retry_refuses_a_run_that_did_not_fail(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g", "input": "ada"})
    refused = api("POST", "/workflows/g/retry")
    assert (refused.status, refused.code) == (400, "InvalidArgumentError")
    assert "only a failed workflow can be retried" in refused.body["message"]
    missing = api("POST", "/workflows/nope/retry")
    assert (missing.status, missing.code) == (404, "WorkflowNotFoundError")


def test_purge_deletes_a_finished_run_and_refuses_a_running_one(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g", "input": "ada"})
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n", "input": 600})

    refused = api("DELETE", "/workflows/n")
    assert (refused.status, refused.code) == (400, "InvalidArgumentError")
    assert "cancel it first" in refused.body["message"]
    assert api("GET", "/workflows/n").body["status"] == "running"

    purged = api("DELETE", "/workflows/g")
    assert (purged.status, purged.body) == (200, {"id": "g", "purged": True})
    assert api("GET", "/workflows/g").status == 404


def test_every_route_has_an_operation_that_call_reaches() -> None:
    assert set(ROUTE_OF) == {route.operation for route in ROUTES}
    assert {"retry_workflow", "purge_workflow"} <= set(ROUTE_OF)


def test_call_validates_as_the_http_api_does(engine: Engine) -> None:
    with pytest.raises(ApiError) as unknown:
        call(engine, "signal_workflow", params={"workflow_id": "w", "name": "s"}, body={"x": 1})
    assert (unknown.value.status, unknown.value.field) == (400, "x")

    with pytest.raises(ApiError) as limit:
        call(engine, "list_workflows", query={"limit": "0"})
    assert (limit.value.field, limit.value.message) == ("limit", "limit: must be at least 1")

    with pytest.raises(ApiError) as control:
        call(engine, "cancel_workflow", params={"workflow_id": "a\nb"})
    assert control.value.field == "workflow_id"


def test_call_answers_as_the_http_api_does(api: Api, engine: Engine) -> None:
    status, body = call(engine, "start_workflow", body={"workflow_type": "greeter", "id": "c"})
    assert (status, body["status"]) == (201, "completed")
    assert call(engine, "describe_workflow", params={"workflow_id": "c"})[1] == (
        api("GET", "/workflows/c").body
    )
    typed = call(engine, "list_workflows", query={"limit": 1, "status": "completed"})[1]
    assert [item["id"] for item in typed["items"]] == ["c"]

    with pytest.raises(Exception) as missing:
        call(engine, "describe_workflow", params={"workflow_id": "none"})
    assert error_of(missing.value).status == 404


def test_a_retry_keeps_the_failure_in_describe_and_events(api: Api) -> None:
    """The first failure stays, with where it raised; the retry is an event (ADR 0044)."""
    api("POST", "/workflows", {"workflow_type": "failing", "id": "h"})
    api("POST", "/workflows/h/retry")  # explode raises again
    described = api("GET", "/workflows/h").body
    rows = [(f["attempt"], f["after_retries"]) for f in described["failed_attempts"]]
    assert rows == [(1, 0), (2, 1)]
    assert all("RuntimeError: boom" in f["traceback"] for f in described["failed_attempts"])
    events = api("GET", "/workflows/h/events").body["items"]
    kinds = [event["type"] for event in events]
    assert kinds.count("run.failed") == 2 and kinds.count("step.failed") == 2
    [retried] = [event for event in events if event["type"] == "run.retried"]
    assert (retried["step"], retried["retry"]) == ("1", 1)
