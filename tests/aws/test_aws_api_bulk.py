"""The bulk routes on moto DynamoDB, through the REST proxy events API Gateway sends: a dry
run, the confirmed call, the audit record with the API caller's identity, and the errors."""

from __future__ import annotations

from typing import Any

import pytest
from aws_support import Api, reply_of, rest_event

from weft_serverless.aws.caller import caller_of

CALLER = "arn:aws:iam::123456789012:user/ops-alice"


def _start(api: Api, workflow_type: str, *ids: str) -> None:
    for workflow_id in ids:
        value = 3600 if workflow_type == "napper" else workflow_id
        body = {"workflow_type": workflow_type, "id": workflow_id, "input": value}
        assert api("POST", "/workflows", body).status == 201


def test_signal_all_through_the_routes_records_the_caller(api: Api) -> None:
    _start(api, "approval", "a-1", "a-2")
    _start(api, "napper", "n-1")
    body = {"name": "approve", "payload": True, "filter": {"workflow_type": "approval"}}
    preview = api("POST", "/bulk/signal", {**body, "dry_run": True})
    assert preview.status == 200
    assert (preview.body["count"], preview.body["filter"]) == (2, {"workflow_type": "approval"})

    event = rest_event("POST", "/bulk/signal", {**body, "confirm": preview.body["token"]})
    event["requestContext"]["identity"] = {"userArn": CALLER}
    done = reply_of(api.handler(event, api.context()))
    assert done.status == 200
    assert (done.body["status"], done.body["done"], done.body["caller"]) == ("completed", 2, CALLER)
    for workflow_id in ("a-1", "a-2"):
        result = api("GET", f"/workflows/{workflow_id}").body["result"]
        assert result == {"order": workflow_id, "approved": True, "items": []}
    assert api("GET", "/workflows/n-1").body["status"] == "running"

    listed = api("GET", "/bulk").body["items"]
    assert [item["id"] for item in listed] == [done.body["id"]]
    shown = api("GET", f"/bulk/{done.body['id']}").body
    assert shown == done.body and shown["kind"] == "signal" and shown["signal"] == "approve"


def test_cancel_and_retry_routes_and_their_errors(api: Api) -> None:
    _start(api, "napper", "n-1", "n-2")
    _start(api, "failing", "f-1")
    unconfirmed = api("POST", "/bulk/cancel", {"filter": {"workflow_type": "napper"}})
    assert (unconfirmed.status, unconfirmed.code) == (409, "BulkConfirmationError")
    unknown = api("POST", "/bulk/cancel", {"filter": {"colour": "red"}, "dry_run": True})
    assert (unknown.status, unknown.code, unknown.body["field"]) == (
        400,
        "InvalidArgumentError",
        "colour",
    )
    not_object = api("POST", "/bulk/cancel", {"filter": ["napper"], "dry_run": True})
    assert (not_object.status, not_object.body["field"]) == (400, "filter")
    assert api("GET", "/bulk").body["items"] == []

    token = api("POST", "/bulk/cancel", {"filter": {"workflow_type": "napper"}, "dry_run": True})
    body = {"filter": {"workflow_type": "napper"}, "confirm": token.body["token"], "reason": "r"}
    cancelled = api("POST", "/bulk/cancel", body).body
    assert (cancelled["done"], cancelled["reason"], cancelled["caller"]) == (2, "r", None)
    assert api("GET", "/workflows/n-1").body["status"] == "cancelled"

    retry = api("POST", "/bulk/retry", {"dry_run": True}).body
    assert (retry["count"], retry["filter"]) == (1, {"status": "failed"})
    retried = api("POST", "/bulk/retry", {"confirm": retry["token"]}).body
    assert (retried["kind"], retried["done"]) == ("retry", 1)

    missing = api("GET", "/bulk/1767225600000-0123abcd")
    assert (missing.status, missing.code) == (404, "BulkOperationNotFoundError")
    malformed = api("GET", "/bulk/nope")  # no operation id has this form: refused unread
    assert (malformed.status, malformed.body["field"]) == (400, "operation_id")


@pytest.mark.parametrize(
    ("context", "caller"),
    [
        ({"identity": {"userArn": CALLER, "caller": "AIDA"}}, CALLER),  # REST API, IAM
        ({"authorizer": {"iam": {"userArn": CALLER}}}, CALLER),  # HTTP API or URL, IAM
        ({"authorizer": {"jwt": {"claims": {"sub": "user-7"}}}}, "user-7"),  # HTTP API, JWT
        ({"authorizer": {"claims": {"sub": "user-8"}}}, "user-8"),  # REST API, Cognito
        ({"authorizer": {"principalId": "svc-9"}}, "svc-9"),  # REST Lambda authoriser
        ({"authorizer": {"lambda": {"principalId": "svc-10"}}}, "svc-10"),  # HTTP Lambda
        ({"identity": {"userArn": None, "sourceIp": "1.2.3.4"}}, None),  # anonymous
        ({}, None),
    ],
)
def test_the_caller_is_read_from_each_front_doors_request_context(
    context: dict[str, Any], caller: str | None
) -> None:
    assert caller_of({"requestContext": context}) == caller
    assert caller_of({}) is None
