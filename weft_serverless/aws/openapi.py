"""The OpenAPI 3.1 document of the HTTP API, generated from the route table.

``docs/openapi.json`` is this module's output, committed; a test regenerates it and fails
on any difference. Regenerate after changing a route::

    python -m weft_serverless.aws.openapi > docs/openapi.json
"""

from __future__ import annotations

import json
from typing import Any

from weft_serverless import WORKFLOW_STATUSES, __version__
from weft_serverless.aws.openapi_operations import operation
from weft_serverless.aws.route_types import MAX_CORRELATION_ID
from weft_serverless.aws.routes import ROUTES
from weft_serverless.aws.schemas import ANY, Schema


def _obj(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    return {"type": "object", "properties": properties, "required": required or list(properties)}


NULLABLE_STRING: Schema = {"type": ["string", "null"]}
STATUS: Schema = {"type": "string", "enum": list(WORKFLOW_STATUSES)}

COMPONENTS: dict[str, Schema] = {
    "Error": _obj(
        {
            "code": {"type": "string", "description": "Stable error code (the class name)."},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "The input at fault."},
            "issues": {"type": "array", "items": {"type": "object"}},
            "retryable": {"type": "boolean"},
            "workflow_type": {"type": "string", "description": "429: the limited type."},
            "key": {"type": "string", "description": "429: the concurrency key at its limit."},
            "limit": {"type": "integer", "description": "429: the type's limit per key."},
        },
        ["code", "message"],
    ),
    "Workflow": _obj(
        {
            "id": {"type": "string"},
            "workflow_type": {"type": "string"},
            "version": {"type": "string"},
            "status": STATUS,
            "created_at": {"type": "number", "description": "Epoch seconds."},
            "updated_at": {"type": "number", "description": "Epoch seconds."},
            "result": ANY,
            "error": {"type": ["object", "null"]},
            "parent_id": NULLABLE_STRING,
            "owner": {"type": ["object", "null"], "description": "Current claim holder."},
            "input": ANY,
            "run": {
                "type": "integer",
                "minimum": 1,
                "description": "Which run of this id: 1, then one more per continue_as_new.",
            },
            "concurrency_key": {
                "type": ["string", "null"],
                "description": "The key the run counts against its type's concurrency limit.",
            },
            "schedule_id": {
                "type": ["string", "null"],
                "description": "The schedule that started the run (a fire, a trigger or a "
                "backfill); null for a run started otherwise.",
            },
            "failed_attempts": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/FailedAttempt"},
                "description": "Only on GET /workflows/{workflow_id}: failed activity attempts "
                "by step, the newest 10 retried ones of each step and each final failure "
                "(a retry of the run keeps the one it ran again).",
            },
            "waiting_for": {
                "type": ["object", "null"],
                "properties": {
                    name: {"type": "array", "items": {"type": "string"}}
                    for name in ("signals", "updates", "queries")
                },
                "required": ["signals", "updates", "queries"],
                "description": "Only on GET /workflows/{workflow_id} (and the answers of "
                "suspend, resume and retry): what a running or suspended run waits for now, "
                "found by replaying its history read-only as a query does: the signals its "
                "parked step waits on (unfinished branches included) and the updates and "
                "queries its handlers answer. null when the run is pending or finished, or "
                "the deployment does not register its type. A signal of another name is "
                "kept until the run waits for it.",
            },
            "teardown": {
                "type": "object",
                "description": "Only when the run's end armed a teardown of its finalizers: "
                "status (pending, running, completed), reason, holder, next_attempt_at and "
                "finalizers (activity, position, state, attempts, last_error).",
            },
        },
        required=[
            "id",
            "workflow_type",
            "version",
            "status",
            "created_at",
            "updated_at",
            "result",
            "error",
            "parent_id",
            "owner",
            "input",
            "run",
            "concurrency_key",
            "schedule_id",
        ],
    ),
    "FailedAttempt": _obj(
        {
            "step": {"type": "string", "description": "Step number from 1, with its branch."},
            "slot": {"type": "string"},
            "activity": {"type": "string"},
            "attempt": {"type": "integer", "minimum": 1},
            "error_type": {"type": "string"},
            "message": {"type": "string", "description": "Cut at 1,024 characters."},
            "failed_at": {"type": ["number", "null"], "description": "Epoch seconds."},
            "retry_at": {
                "type": ["number", "null"],
                "description": "When the next attempt is due (a retry of the run, for a final "
                "failure it ran again); null after the last one.",
            },
            "started_at": {
                "type": ["number", "null"],
                "description": "When the attempt started (epoch seconds); null if not kept.",
            },
            "traceback": {
                "type": ["string", "null"],
                "description": "Where the activity raised: its innermost frames, at most "
                "2,048 bytes; null for a timeout or a failure reported from outside.",
            },
            "after_retries": {
                "type": "integer",
                "minimum": 0,
                "description": "How many retries of the run came before this attempt.",
            },
        },
        ["step", "slot", "activity", "attempt", "error_type", "message", "failed_at", "retry_at"],
    ),
    "WorkflowSummary": _obj(
        {
            "id": {"type": "string"},
            "workflow_type": {"type": "string"},
            "status": STATUS,
            "created_at": {"type": "number"},
            "search_attributes": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}},
        }
    ),
    "WorkflowCounts": _obj(
        {
            "group_by": {"type": "string"},
            "counts": {
                "type": "array",
                "items": _obj({"value": ANY, "count": {"type": "integer"}}),
            },
        }
    ),
    "WorkflowPage": _obj(
        {
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/WorkflowSummary"}},
            "next_cursor": NULLABLE_STRING,
            "counts": {
                "type": "array",
                "items": _obj({"value": STATUS, "count": {"type": "integer"}}),
                "description": "Only with ?counts=status: the runs per status that pass "
                "every filter but status, largest first.",
            },
        },
        ["items", "next_cursor"],
    ),
    "EventPage": _obj(
        {
            "items": {
                "type": "array",
                "items": _obj(
                    {
                        "event_id": {"type": "string"},
                        "type": {"type": "string"},
                        "workflow_id": {"type": "string"},
                        "workflow_type": {"type": "string"},
                        "at": {"type": "number"},
                    }
                ),
            },
            "next_after": NULLABLE_STRING,
        }
    ),
    "Result": _obj(
        {
            "id": {"type": "string"},
            "status": STATUS,
            "result": ANY,
            "error": {"type": ["object", "null"]},
        }
    ),
    "SignalAccepted": _obj(
        {"id": {"type": "string"}, "signal": {"type": "string"}, "status": STATUS}
    ),
    "UpdateResult": _obj({"id": {"type": "string"}, "update": {"type": "string"}, "result": ANY}),
    "QueryResult": _obj({"id": {"type": "string"}, "query": {"type": "string"}, "result": ANY}),
    "ActivityAccepted": _obj({"accepted": {"type": "boolean"}}),
    "Purged": _obj({"id": {"type": "string"}, "purged": {"type": "boolean"}}),
    "Schedule": _obj(
        {
            "id": {"type": "string"},
            "workflow_type": {"type": "string"},
            "cron": NULLABLE_STRING,
            "every": {"type": ["number", "null"], "description": "Seconds."},
            "timezone": {"type": "string"},
            "overlap": {"type": "string", "enum": ["skip", "queue", "cancel_running", "allow"]},
            "paused": {"type": "boolean"},
            "next_fire_at": {
                "type": ["number", "null"],
                "description": "Nominal time of the next fire, epoch seconds; null while "
                "paused or after end_at.",
            },
            "last_fire_at": {"type": ["number", "null"]},
            "fired": {"type": "integer"},
            "missed": {"type": "integer"},
            "skipped": {"type": "integer"},
            "running": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Ids of runs it started that are not terminal.",
            },
            "catchup_window": {"type": "number"},
            "jitter": {"type": "number"},
            "start_at": {"type": ["number", "null"]},
            "end_at": {"type": ["number", "null"]},
            "queued_fire_at": {"type": ["number", "null"]},
            "input": ANY,
        },
        required=["id", "workflow_type", "overlap", "paused", "next_fire_at", "running"],
    ),
    "SchedulePage": _obj(
        {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Schedule"}}}
    ),
    "ScheduleDeleted": _obj({"id": {"type": "string"}, "deleted": {"type": "boolean"}}),
    "ScheduleFired": _obj(
        {
            "schedule": {"$ref": "#/components/schemas/Schedule"},
            "workflow_id": {
                "type": ["string", "null"],
                "description": "The run started; null when the overlap policy skipped or "
                "queued the fire.",
            },
        }
    ),
    "BulkPreview": _obj(
        {
            "kind": {"type": "string", "enum": ["cancel", "signal", "retry"]},
            "count": {"type": "integer", "description": "Runs matching now."},
            "token": {"type": "string", "description": "Pass as confirm to the real call."},
            "expires_at": {"type": "number", "description": "The token's expiry, epoch s."},
            "filter": {"type": "object"},
        },
        required=["kind", "count", "token", "expires_at", "filter"],
    ),
    "BulkOperation": _obj(
        {
            "id": {"type": "string"},
            "kind": {"type": "string", "enum": ["cancel", "signal", "retry"]},
            "status": {"type": "string", "enum": ["running", "completed"]},
            "filter": {"type": "object"},
            "actor": {"type": "string"},
            "caller": NULLABLE_STRING,
            "reason": NULLABLE_STRING,
            "created_at": {"type": "number"},
            "updated_at": {"type": "number"},
            "finished_at": {"type": ["number", "null"]},
            "done": {"type": "integer"},
            "skipped": {"type": "integer"},
            "failed": {"type": "integer"},
            "matched": {"type": "integer"},
            "signal": NULLABLE_STRING,
            "cursor": NULLABLE_STRING,
            "errors": {"type": "array", "items": {"type": "object"}},
        },
        required=["id", "kind", "status", "filter", "actor", "done", "skipped", "failed"],
    ),
    "BulkResult": {
        "oneOf": [
            {"$ref": "#/components/schemas/BulkPreview"},
            {"$ref": "#/components/schemas/BulkOperation"},
        ]
    },
    "BulkPage": _obj(
        {"items": {"type": "array", "items": {"$ref": "#/components/schemas/BulkOperation"}}}
    ),
    "ScheduleBackfilled": _obj(
        {"id": {"type": "string"}, "workflow_ids": {"type": "array", "items": {"type": "string"}}}
    ),
}


def document() -> dict[str, Any]:
    """The OpenAPI document as a dict."""
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method.lower()] = operation(route)
    correlation = (
        "Names the request in every log line, and is echoed back. A value of 1 to "
        f"{MAX_CORRELATION_ID} printable ASCII characters is used as it is; any other is "
        "ignored, and API Gateway's request id is used instead."
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "weft-serverless workflow API",
            "version": __version__,
            "description": "Start, inspect and talk to durable workflows. Errors are JSON "
            "with a stable `code`; a rejected request writes nothing.",
        },
        "security": [{"sigv4": []}],
        "paths": paths,
        "components": {
            "schemas": COMPONENTS,
            "parameters": {
                "CorrelationId": {
                    "name": "X-Correlation-Id",
                    "in": "header",
                    "description": correlation,
                    "schema": {"type": "string"},
                }
            },
            "headers": {
                "CorrelationId": {
                    "description": "The request's correlation id: the caller's, or API "
                    "Gateway's request id.",
                    "schema": {
                        "type": "string",
                        "pattern": f"^[\\x20-\\x7e]{{1,{MAX_CORRELATION_ID}}}$",
                    },
                }
            },
            "securitySchemes": {
                "sigv4": {
                    "type": "apiKey",
                    "name": "Authorization",
                    "in": "header",
                    "description": "AWS Signature Version 4 (the API uses IAM authorization).",
                    "x-amazon-apigateway-authtype": "awsSigv4",
                }
            },
        },
    }


def render() -> str:
    """The committed text of ``docs/openapi.json``."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
