"""The HTTP API as data: one table that the handler registers and the OpenAPI document
describes, so the two cannot drift apart.

Each ``Route`` lists its path, its body and query fields (as JSON Schema), its success and
error statuses. The fields also drive request validation (``validation.py``): a bad input is
refused with a 400 naming the field, before the engine sees it.
"""

from __future__ import annotations

from weft_serverless import WORKFLOW_STATUSES as STATUSES
from weft_serverless.aws.bulk_routes import BULK_ROUTES
from weft_serverless.aws.route_types import _FILTERS, _NAME_ERRORS, _WAIT, Field, Route
from weft_serverless.aws.schedule_routes import SCHEDULE_ROUTES
from weft_serverless.aws.schemas import ANY, DEDUP_ID, ID, INSTANT, NAME, TAGS, duration, text

ROUTES: tuple[Route, ...] = (
    Route(
        "start_workflow",
        "POST",
        "/workflows",
        "Start a workflow; optionally wait a bounded time for its result.",
        (201,),
        "Workflow",
        body=(
            Field("workflow_type", NAME, "Registered type.", True),
            Field("input", ANY, "The workflow's input."),
            Field("id", ID, "Workflow id; a random one when absent."),
            Field("idempotency_key", text(256), "Repeat-safe key."),
            Field(
                "execution_timeout",
                duration(0, exclusive=True),
                "End the run timed-out after this long.",
            ),
            Field("start_at", INSTANT, "Start later, at this time (not with start_after)."),
            Field("start_after", duration(), "Start after this delay (not with start_at)."),
            Field(
                "search_attributes",
                {"type": "object"},
                "Values of search attributes the workflow type declares.",
            ),
            Field("tags", TAGS, "Short strings to find the run by."),
            _WAIT,
        ),
        errors=(400, 409, 413, 429, 500, 503),
        payload_field="input",
        body_rules={"not": {"required": ["start_at", "start_after"]}},
    ),
    Route(
        "list_workflows",
        "GET",
        "/workflows",
        "List workflows, oldest first, one page at a time.",
        (200,),
        "WorkflowPage",
        query=(
            Field("status", {"type": "string", "enum": list(STATUSES)}, "Only this status."),
            Field("workflow_type", {"type": "string", "minLength": 1}, "Only this type."),
            Field(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                "Page size.",
            ),
            Field("cursor", {"type": "string", "minLength": 1}, "next_cursor of the last page."),
            *_FILTERS,
            Field(
                "order",
                {"type": "string", "enum": ["oldest", "newest"], "default": "oldest"},
                "Oldest or newest first.",
            ),
            Field(
                "counts",
                {"type": "string", "enum": ["status"]},
                "Also count the runs that pass every filter but status, per status "
                "(as GET /workflow-counts?group_by=status), from the same read.",
            ),
        ),
        errors=(400, 500, 503),
    ),
    Route(
        "count_workflows",
        "GET",
        "/workflow-counts",
        "Count workflows matching the list filters, per status, type or search attribute.",
        (200,),
        "WorkflowCounts",
        query=(
            Field(
                "group_by",
                {"type": "string", "minLength": 1, "default": "status"},
                "status, workflow_type, or a search attribute name.",
            ),
            Field("status", {"type": "string", "enum": list(STATUSES)}, "Only this status."),
            Field("workflow_type", {"type": "string", "minLength": 1}, "Only this type."),
            *_FILTERS,
        ),
        errors=(400, 500, 503),
    ),
    Route(
        "describe_workflow",
        "GET",
        "/workflows/{workflow_id}",
        "A workflow's status, input, result or error, owner and failed activity attempts.",
        (200,),
        "Workflow",
    ),
    Route(
        "get_result",
        "GET",
        "/workflows/{workflow_id}/result",
        "The outcome: 200 once finished, 202 while it still runs.",
        (200, 202),
        "Result",
        query=(_WAIT,),
    ),
    Route(
        "list_events",
        "GET",
        "/workflows/{workflow_id}/events",
        "The run's event log in order, one page at a time (after= the last event_id).",
        (200,),
        "EventPage",
        query=(
            Field("after", {"type": "string", "minLength": 1}, "next_after of the last page."),
            Field(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                "Page size.",
            ),
        ),
        errors=(400, 404, 500, 503),
    ),
    Route(
        "signal_workflow",
        "POST",
        "/workflows/{workflow_id}/signals/{name}",
        "Deliver a signal (buffered until the workflow waits for it).",
        (200,),
        "SignalAccepted",
        body=(
            Field("payload", ANY, "The signal's payload."),
            Field("signal_id", DEDUP_ID, "Dedup id."),
        ),
        errors=_NAME_ERRORS,
        payload_field="payload",
    ),
    Route(
        "update_workflow",
        "POST",
        "/workflows/{workflow_id}/updates/{name}",
        "Apply an update and return its handler's result.",
        (200,),
        "UpdateResult",
        body=(
            Field("payload", ANY, "The update's payload."),
            Field("update_id", DEDUP_ID, "Dedup id."),
        ),
        errors=(*_NAME_ERRORS, 422),
        payload_field="payload",
    ),
    Route(
        "query_workflow",
        "POST",
        "/workflows/{workflow_id}/queries/{name}",
        "Answer a query from the workflow's current state (read-only).",
        (200,),
        "QueryResult",
        body=(Field("arg", ANY, "The query's argument."),),
        errors=(400, 404, 413, 500, 503),
        payload_field="arg",
    ),
    *(
        Route(
            f"{action}_workflow",
            "POST",
            f"/workflows/{{workflow_id}}/{action}",
            summary,
            (200,),
            "Workflow",
            body=(),
            errors=(400, 404, 409, 500, 503),
        )
        for action, summary in (
            ("cancel", "Cancel a workflow (repeating it is harmless)."),
            ("suspend", "Pause a workflow until it is resumed."),
            ("resume", "Resume a suspended workflow, or drive a running one now."),
            ("retry", "Re-run a failed workflow from its last good step."),
        )
    ),
    Route(
        "purge_workflow",
        "DELETE",
        "/workflows/{workflow_id}",
        "Delete a finished workflow's records now (its idempotency key stays taken).",
        (200,),
        "Purged",
        errors=(400, 404, 409, 500, 503),
    ),
    *SCHEDULE_ROUTES,
    *BULK_ROUTES,
)
