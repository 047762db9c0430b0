"""The HTTP API as data: one table that the handler registers and the OpenAPI document
describes, so the two cannot drift apart.

Each ``Route`` lists its path, its body and query fields (as JSON Schema), its success and
error statuses. The fields also drive request validation (``validation.py``): a bad input is
refused with a 400 naming the field, before the engine sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from weft_serverless import MAX_WORKFLOW_ID_BYTES
from weft_serverless import WORKFLOW_STATUSES as STATUSES

Schema = dict[str, Any]

MAX_BODY_BYTES = 1024 * 1024
"""Bodies above this are refused with a 413 before they are parsed."""
MAX_WAIT_SECONDS = 25.0
"""Longest ``wait_seconds``: API Gateway ends an integration after 29 s."""

ANY: Schema = {"description": "Any JSON value."}
ID: Schema = {"type": "string", "minLength": 1, "maxLength": MAX_WORKFLOW_ID_BYTES}
DURATION: Schema = {
    "type": ["number", "string"],
    "description": "Seconds, or a duration such as '90s', '5m', '1h'.",
}


SCHEDULE_ID: Schema = {"type": "string", "minLength": 1, "maxLength": MAX_WORKFLOW_ID_BYTES - 17}
INSTANT: Schema = {
    "type": ["number", "string"],
    "description": "Epoch seconds, or an ISO 8601 time with a zone.",
}
OVERLAPS = ("skip", "queue", "cancel_running", "allow")


@dataclass(frozen=True, slots=True)
class Field:
    """One body or query field: its name, JSON Schema and whether it must be present."""

    name: str
    schema: Schema
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    """One operation of the API."""

    operation: str
    method: str
    path: str
    summary: str
    success: tuple[int, ...]
    response: str
    body: tuple[Field, ...] | None = None
    query: tuple[Field, ...] = ()
    errors: tuple[int, ...] = (400, 404, 500)
    payload_field: str | None = None

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)

    @property
    def resolver_rule(self) -> str:
        """The path in powertools' syntax: ``/workflows/<workflow_id>``."""
        return re.sub(r"{(\w+)}", r"<\1>", self.path)


_WAIT = Field(
    "wait_seconds",
    {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
    "Wait up to this long for the workflow to finish (bounded by the invocation's time).",
)
_NAME_ERRORS = (400, 404, 409, 413, 500, 503)
_BULK_FIELDS = (
    Field(
        "filter",
        {"type": "object"},
        "The runs to act on: the filters of GET /workflows (status, workflow_type, ...).",
    ),
    Field("dry_run", {"type": "boolean"}, "Count the matching runs and return a token only."),
    Field("confirm", {"type": "string", "minLength": 1}, "The token of the dry run."),
    Field("reason", {"type": "string", "maxLength": 1000}, "Why, for the audit record."),
    Field("page_size", {"type": "integer", "minimum": 1, "maximum": 1000}, "Runs per page."),
)

_FILTERS = (
    Field(
        "where",
        {"type": "string", "minLength": 2},
        'Search attribute conditions as a JSON object: {"customer": "c-7", '
        '"amount": [">=", 100]}; operators ==, !=, <, <=, >, >=, in, prefix.',
    ),
    Field("tags", {"type": "string", "minLength": 1}, "Comma-separated tags, all required."),
    Field("started_after", {"type": "number"}, "Started at or after (epoch seconds)."),
    Field("started_before", {"type": "number"}, "Started before (epoch seconds)."),
    Field("id_prefix", {"type": "string", "minLength": 1}, "Only ids starting with this."),
)

ROUTES: tuple[Route, ...] = (
    Route(
        "start_workflow",
        "POST",
        "/workflows",
        "Start a workflow; optionally wait a bounded time for its result.",
        (201,),
        "Workflow",
        body=(
            Field("workflow_type", {"type": "string", "minLength": 1}, "Registered type.", True),
            Field("input", ANY, "The workflow's input."),
            Field("id", ID, "Workflow id; a random one when absent."),
            Field("idempotency_key", {"type": "string", "minLength": 1}, "Repeat-safe key."),
            Field("execution_timeout", DURATION, "End the run timed-out after this long."),
            Field(
                "start_at",
                {"type": ["number", "string"]},
                "Start later: epoch seconds or an ISO 8601 time with a zone.",
            ),
            Field("start_after", DURATION, "Start after this delay."),
            Field(
                "search_attributes",
                {"type": "object"},
                "Values of search attributes the workflow type declares.",
            ),
            Field("tags", {"type": "array"}, "Short strings to find the run by."),
            _WAIT,
        ),
        errors=(400, 409, 413, 429, 500, 503),
        payload_field="input",
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
            Field("signal_id", {"type": "string", "minLength": 1, "maxLength": 128}, "Dedup id."),
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
            Field("update_id", {"type": "string", "minLength": 1, "maxLength": 128}, "Dedup id."),
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
        )
    ),
    Route(
        "create_schedule",
        "POST",
        "/schedules",
        "Create a cron or interval schedule that starts runs of one workflow type.",
        (201,),
        "Schedule",
        body=(
            Field(
                "schedule_id", SCHEDULE_ID, "The schedule's id; its runs' ids add the time.", True
            ),
            Field("workflow_type", {"type": "string", "minLength": 1}, "Registered type.", True),
            Field("input", ANY, "Every run's input."),
            Field("cron", {"type": "string", "minLength": 1}, "A cron expression (or every)."),
            Field("every", DURATION, "A fixed interval of at least 1 s (or cron)."),
            Field("timezone", {"type": "string", "minLength": 1}, "IANA name (default UTC)."),
            Field("overlap", {"type": "string", "enum": list(OVERLAPS)}, "Default skip."),
            Field("catchup_window", DURATION, "A fire found later than this is missed."),
            Field("jitter", DURATION, "Delay each fire by a deterministic offset below this."),
            Field("start_at", INSTANT, "No fire before: epoch seconds or ISO 8601 with a zone."),
            Field("end_at", INSTANT, "No fire after: epoch seconds or ISO 8601 with a zone."),
        ),
        errors=(400, 409, 413, 500, 503),
        payload_field="input",
    ),
    Route(
        "list_schedules",
        "GET",
        "/schedules",
        "Every schedule, in id order.",
        (200,),
        "SchedulePage",
        errors=(400, 500, 503),
    ),
    Route(
        "describe_schedule",
        "GET",
        "/schedules/{schedule_id}",
        "A schedule's definition, next fire, counters and running runs.",
        (200,),
        "Schedule",
    ),
    Route(
        "delete_schedule",
        "DELETE",
        "/schedules/{schedule_id}",
        "Delete a schedule; the runs it started go on.",
        (200,),
        "ScheduleDeleted",
        errors=(400, 404, 500, 503),
    ),
    *(
        Route(
            f"{action}_schedule",
            "POST",
            f"/schedules/{{schedule_id}}/{action}",
            summary,
            (200,),
            "ScheduleFired" if action == "trigger" else "Schedule",
            body=(),
            errors=(400, 404, 500, 503),
        )
        for action, summary in (
            ("pause", "Stop firing until resumed."),
            ("resume", "Fire again from the first fire after now."),
            ("trigger", "Fire now; the overlap policy applies."),
        )
    ),
    Route(
        "backfill_schedule",
        "POST",
        "/schedules/{schedule_id}/backfill",
        "Start the fires of a past interval, oldest first; the overlap policy applies.",
        (200,),
        "ScheduleBackfilled",
        body=(
            Field("start", INSTANT, "From: epoch seconds or ISO 8601 with a zone.", True),
            Field("end", INSTANT, "To (at most now): epoch seconds or ISO 8601 with a zone.", True),
        ),
        errors=(400, 404, 500, 503),
    ),
    *(
        Route(
            f"bulk_{kind}",
            "POST",
            f"/bulk/{kind}",
            summary,
            (200,),
            "BulkResult",
            body=(*extra, *_BULK_FIELDS),
            errors=(400, 409, 413, 500, 503),
            payload_field="payload" if extra else None,
        )
        for kind, summary, extra in (
            ("cancel", "Cancel every run the filter matches (dry run first).", ()),
            (
                "signal",
                "Signal every run the filter matches, once each (dry run first).",
                (
                    Field("name", {"type": "string", "minLength": 1}, "Signal name.", True),
                    Field("payload", ANY, "The signal's payload."),
                ),
            ),
            ("retry", "Retry every failed run the filter matches (dry run first).", ()),
        )
    ),
    Route(
        "list_bulk",
        "GET",
        "/bulk",
        "Every bulk operation (its audit record), oldest first.",
        (200,),
        "BulkPage",
        errors=(400, 500, 503),
    ),
    Route(
        "describe_bulk",
        "GET",
        "/bulk/{operation_id}",
        "A bulk operation's record: who, when, filter, counts, progress.",
        (200,),
        "BulkOperation",
    ),
    Route(
        "complete_activity",
        "POST",
        "/activities/complete",
        "Complete an asynchronous activity with its result (the token is single use).",
        (200,),
        "ActivityAccepted",
        body=(
            Field("token", {"type": "string", "minLength": 1}, "From complete_async().", True),
            Field("result", ANY, "The activity's result."),
        ),
        errors=(400, 404, 409, 413, 500, 503),
        payload_field="result",
    ),
    Route(
        "fail_activity",
        "POST",
        "/activities/fail",
        "Fail an attempt of an asynchronous activity; its retry policy decides what follows.",
        (200,),
        "ActivityAccepted",
        body=(
            Field("token", {"type": "string", "minLength": 1}, "From complete_async().", True),
            Field("message", {"type": "string"}, "What went wrong.", True),
            Field(
                "error_type",
                {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"},
                "Error type name the workflow sees (default ActivityError).",
            ),
        ),
        errors=(400, 404, 409, 500, 503),
    ),
)
