"""The OpenAPI document: generated from the route table, committed, and kept in step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from aws_support import Api

from weft_serverless.aws import ROUTES, openapi_document
from weft_serverless.aws.openapi import render

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.json"
REGENERATE = "python -m weft_serverless.aws.openapi > docs/openapi.json"


def test_the_committed_document_matches_the_route_table() -> None:
    assert COMMITTED.read_text() == render(), f"docs/openapi.json is stale; run: {REGENERATE}"


def test_the_regenerate_command_prints_the_document() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "weft_serverless.aws.openapi"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == render()


def test_every_route_is_documented_with_its_statuses() -> None:
    doc = openapi_document()
    assert doc["openapi"].startswith("3.1")
    operations = {
        op["operationId"]: (path, method, op)
        for path, methods in doc["paths"].items()
        for method, op in methods.items()
    }
    assert sorted(operations) == sorted(route.operation for route in ROUTES)
    for route in ROUTES:
        path, method, op = operations[route.operation]
        assert (path, method) == (route.path, route.method.lower())
        assert set(op["responses"]) == {str(s) for s in (*route.success, *route.errors)}
        for status in route.errors:
            schema = op["responses"][str(status)]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Error"}
        if route.body:
            body = op["requestBody"]["content"]["application/json"]["schema"]
            assert body["additionalProperties"] is False
            assert list(body["properties"]) == [field.name for field in route.body]
    refs = json.dumps(doc).count('"$ref": "#/components/schemas/')
    assert refs > len(ROUTES)
    for name in json.dumps(doc).split('"#/components/schemas/')[1:]:
        assert name.split('"')[0] in doc["components"]["schemas"]


def test_every_documented_route_is_served(api: Api) -> None:
    """Each route answers something other than 404 NotFound/405 (it is registered)."""
    for route in ROUTES:
        path = route.path.replace("{workflow_id}", "missing").replace("{name}", "x")
        reply = api(route.method, path, {} if route.method == "POST" else None)
        assert reply.code not in ("NotFound", "MethodNotAllowed"), route.operation
