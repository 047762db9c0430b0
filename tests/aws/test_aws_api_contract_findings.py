"""Defects the schemathesis run (``test_aws_api_fuzz.py``) found, each pinned on its own.

The fuzzer's seed and budget may stop reaching a case; these tests keep each one covered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_support import Api

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/bulk/cancel", "POST"),
        ("PUT", "/bulk/signal", "POST"),
        ("DELETE", "/bulk/retry", "POST"),
        ("POST", "/bulk/1767225600000-0123abcd", "GET"),
        ("PUT", "/workflows", "GET, POST"),
    ],
)
def test_a_concrete_path_allows_only_its_own_methods(
    api: Api, method: str, path: str, allowed: str
) -> None:
    """OpenAPI matches ``/bulk/cancel`` before ``/bulk/{operation_id}``: a GET there is a 405
    whose ``Allow`` names POST alone (it was routed to describe_bulk, and ``Allow`` said
    ``GET, POST``)."""
    reply = api(method, path, {} if method != "GET" else None)
    assert (reply.status, reply.code) == (405, "MethodNotAllowed"), reply.body
    assert reply.headers["Allow"] == allowed


def test_a_trigger_after_its_run_was_purged_answers_200(api: Api) -> None:
    """Trigger, purge the run, trigger again in the same second: the run id is the purged
    one's, whose owner epoch survives; the second trigger was a 500 ("kept racing")."""
    body = {"schedule_id": "nightly", "workflow_type": "greeter", "every": 3600}
    assert api("POST", "/schedules", body).status == 201
    first = api("POST", "/schedules/nightly/trigger")
    assert first.status == 200, first.body
    run = first.body["workflow_id"]
    assert api("DELETE", f"/workflows/{run}").status == 200
    again = api("POST", "/schedules/nightly/trigger")
    assert again.status == 200, again.body
    assert again.body["workflow_id"] == run
    assert api("GET", f"/workflows/{run}").body["status"] == "completed"


def test_a_whole_float_is_an_integer_as_json_schema_says(api: Api) -> None:
    """``"page_size": 1.0`` is an integer to JSON Schema; it was a 400 "must be an integer,
    not number"."""
    reply = api("POST", "/bulk/cancel", {"dry_run": True, "page_size": 1.0})
    assert reply.status == 200, reply.body
    assert api("POST", "/bulk/cancel", {"dry_run": True, "page_size": 1.5}).status == 400


def test_the_document_says_a_bulk_retry_filter_takes_only_failed_runs(api: Api) -> None:
    """A retry's filter may name status ``failed`` only (else the engine refuses it); the
    document allowed every status."""
    document = json.loads(DOCUMENT.read_text())
    body = document["paths"]["/bulk/retry"]["post"]["requestBody"]["content"]
    status = body["application/json"]["schema"]["properties"]["filter"]["properties"]["status"]
    assert status["enum"] == ["failed"]
    refused = api("POST", "/bulk/retry", {"dry_run": True, "filter": {"status": "running"}})
    assert (refused.status, refused.body["field"]) == (400, "status")
    allowed = api("POST", "/bulk/retry", {"dry_run": True, "filter": {"status": "failed"}})
    assert allowed.status == 200, allowed.body


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/bulk/signal", {"name": "go", "dry_run": True, "filter": {"name": "other"}}, "name"),
        ("/bulk/cancel", {"dry_run": True, "filter": {"page_size": 0}}, "page_size"),
        ("/bulk/cancel", {"dry_run": True, "filter": {"caller": "someone"}}, "caller"),
    ],
)
def test_a_bulk_filter_holds_filters_only(api: Api, route: str, body: dict, field: str) -> None:
    """A key of ``filter`` that is no filter is a 400 naming it; it reached the engine call as
    an option (``{"name": ...}`` on a signal was a 500, "multiple values for argument 'name'";
    ``{"caller": ...}`` was overwritten silently)."""
    reply = api("POST", route, body)
    assert (reply.status, reply.code, reply.body["field"]) == (400, "InvalidArgumentError", field)
