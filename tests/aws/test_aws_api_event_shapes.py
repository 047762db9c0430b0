"""The same routes behind every front door: a REST API (payload 1.0), an HTTP API and a
Lambda function URL (payload 2.0), each event built as that service sends it.

An HTTP API event has no ``httpMethod``; the handler once read it and crashed with
``KeyError`` on every request.
"""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest
from aws_support import Api, FakeMonotonic, rest_event

from weft_serverless import Engine
from weft_serverless.aws import make_api_handler
from weft_serverless.aws.api import event_shape

SHAPES = ["rest", "http", "function-url"]


@pytest.fixture(params=SHAPES)
def front(request: pytest.FixtureRequest, engine: Engine, monotonic: FakeMonotonic) -> Api:
    handler = make_api_handler(sleep=monotonic.sleep, monotonic=monotonic)
    return Api(handler, monotonic, shape=request.param)


def test_each_event_is_read_as_the_shape_it_is() -> None:
    assert [event_shape(rest_event("GET", "/workflows", shape=s)) for s in SHAPES] == SHAPES


def test_a_workflow_goes_through_every_kind_of_route(front: Api) -> None:
    started = front("POST", "/workflows", {"workflow_type": "approval", "id": "wf-1", "input": 1})
    assert (started.status, started.body["status"]) == (201, "running")

    page = front("GET", "/workflows", query={"status": "running", "limit": "5"})
    assert page.status == 200 and [row["id"] for row in page.body["items"]] == ["wf-1"]

    assert front("POST", "/workflows/wf-1/updates/add", {"payload": "pen"}).status == 200
    query = front("POST", "/workflows/wf-1/queries/items", {})
    assert (query.status, query.body["result"]) == (200, ["pen"])
    assert front("POST", "/workflows/wf-1/signals/approve", {"payload": True}).status == 200

    done = front("GET", "/workflows/wf-1/result")
    assert (done.status, done.body["status"]) == (200, "completed")
    assert done.body["result"] == {"order": 1, "approved": True, "items": ["pen"]}


def test_encoded_bodies_query_strings_and_correlation_ids_carry_over(front: Api) -> None:
    raw = base64.b64encode(json.dumps({"workflow_type": "greeter", "input": "ada"}).encode())
    started = front(
        "POST",
        "/workflows",
        raw_body=raw.decode(),
        base64=True,
        headers={"X-Correlation-Id": "corr-42"},
    )
    assert started.status == 201 and started.body["result"] == {"greeting": "hello ada"}
    headers = {name.lower(): value for name, value in started.headers.items()}
    assert headers["x-correlation-id"] == "corr-42"

    refused = front("GET", "/workflows", query={"limit": "0"})
    assert (refused.status, refused.body["field"]) == (400, "limit")


def test_errors_answer_the_same_on_every_front_door(front: Api) -> None:
    deep = '{"workflow_type": "greeter", "input": ' + "[" * 5000 + "]" * 5000 + "}"
    nested = front("POST", "/workflows", raw_body=deep)
    assert (nested.status, nested.code, nested.body["field"]) == (
        400,
        "InvalidArgumentError",
        "body",
    )

    missing = front("GET", "/nowhere")
    assert (missing.status, missing.code) == (404, "NotFound")

    wrong = front("PUT", "/workflows/wf-1")
    headers = {name.lower(): value for name, value in wrong.headers.items()}
    assert (wrong.status, wrong.code, headers["allow"]) == (405, "MethodNotAllowed", "DELETE, GET")

    unknown = front("GET", "/workflows/nope")
    assert (unknown.status, unknown.code) == (404, "WorkflowNotFoundError")


@pytest.mark.parametrize("workflow_id", ["order 7", "a%41", "caf\u00e9"])
def test_a_workflow_id_is_decoded_exactly_once_whatever_the_front_door(
    front: Api, workflow_id: str
) -> None:
    """REST APIs and function URLs send the path encoded, an HTTP API decoded."""
    body = {"workflow_type": "greeter", "id": workflow_id, "input": "ada"}
    assert front("POST", "/workflows", body).status == 201
    encoded = urllib.parse.quote(workflow_id, safe="")
    described = front("GET", f"/workflows/{encoded}")
    assert (described.status, described.body["id"]) == (200, workflow_id)
