"""What each API route does, given a validated request: one function per ``Route.operation``.

Each returns ``(status, JSON-able body)`` and lets errors propagate; the handler maps them
to statuses. Values the engine would refuse later (durations, start times) are checked here
first, so the 400 can name the field.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from weft_serverless import (
    Engine,
    InvalidFilterError,
    WorkflowDescription,
    WorkflowNotRunningError,
    waiting_for,
)
from weft_serverless.aws.responses import bad_request

Reply = tuple[int, Any]
POLL_SECONDS = 0.25


class Scope(Protocol):
    """What an operation needs of whoever runs it: a Lambda invocation, or a local caller."""

    def time_left(self) -> float:
        """Seconds before the caller must answer."""
        ...

    def bind(self, **keys: Any) -> None:
        """Name (e.g. ``workflow_id``) in every later log line of this request."""
        ...


@dataclass(frozen=True, slots=True)
class Request:
    """A validated request: path parameters, query and body fields, and what serves it."""

    engine: Engine
    invocation: Scope
    params: dict[str, str]
    query: dict[str, Any]
    body: dict[str, Any]
    reserve: float
    sleep: Callable[[float], None]
    monotonic: Callable[[], float]
    caller: str | None = None  # the authenticated caller, for audit records
    actor: str | None = None  # who asks, as a local front end names them, for the same

    @property
    def workflow_id(self) -> str:
        return self.params["workflow_id"]


def workflow_json(description: WorkflowDescription) -> dict[str, Any]:
    """The ``Workflow`` object of the API."""
    return {
        "id": description.id,
        "workflow_type": description.workflow_type,
        "version": description.version,
        "status": description.status,
        "created_at": description.created_at,
        "updated_at": description.updated_at,
        "result": description.result,
        "error": description.error,
        "parent_id": description.parent_id,
        "owner": description.owner,
        "input": description.input,
        "run": description.run,
        "concurrency_key": description.concurrency_key,
        "schedule_id": description.schedule_id,
        **(
            {}
            if description.failed_attempts is None
            else {"failed_attempts": list(description.failed_attempts)}
        ),
        **({} if description.teardown is None else {"teardown": description.teardown}),
    }


def wait_for(request: Request, workflow_id: str, wait_seconds: float) -> WorkflowDescription:
    """Poll until the workflow finishes or the wait (capped by the invocation) runs out.

    In manual mode a start drives the run inline, so most short workflows are done before
    the first poll; waiting only helps when another container is finishing it.
    """
    allowed = min(wait_seconds, request.invocation.time_left() - request.reserve)
    started = request.monotonic()
    if allowed > 0:
        # A parked run's claim would otherwise be held (and renewed) until this invocation
        # ends, so the container that fires its timer would find it busy and skip it: the
        # wait could only ever see what was done before it began.
        request.engine.runtime.fence.release_parked()
    while True:
        description = request.engine.describe(workflow_id)
        remaining = allowed - (request.monotonic() - started)
        if description.is_terminal or remaining <= 0:
            return description
        request.sleep(min(POLL_SECONDS, remaining))


def start_workflow(request: Request) -> Reply:
    body = request.body
    workflow_id = body.get("id") or uuid.uuid4().hex
    request.invocation.bind(workflow_id=workflow_id)
    handle = request.engine.start(
        body["workflow_type"],
        body.get("input"),
        id=workflow_id,
        idempotency_key=body.get("idempotency_key"),
        execution_timeout=body.get("execution_timeout"),
        start_at=_instant(body.get("start_at"), "start_at"),
        start_after=body.get("start_after"),
        search_attributes=body.get("search_attributes"),
        tags=body.get("tags"),
    )
    if handle.id != workflow_id:  # an idempotency key returned an earlier run
        request.invocation.bind(workflow_id=handle.id)
    return 201, workflow_json(wait_for(request, handle.id, body.get("wait_seconds", 0.0)))


def list_workflows(request: Request) -> Reply:
    query = request.query
    page = (query.get("status"), query.get("workflow_type"), query.get("limit", 100))
    options = {"order": query.get("order", "oldest"), **_filters(query)}
    counts = None
    if "counts" in query:  # a page beside its status counts: one read of the index
        rows, cursor, counts = request.engine.list_page_with_counts(
            *page, query.get("cursor"), **options
        )
    else:
        rows, cursor = request.engine.list_page(*page, query.get("cursor"), **options)
    items = [
        {
            "id": r.id,
            "workflow_type": r.workflow_type,
            "status": r.status,
            "created_at": r.created_at,
            "search_attributes": r.search_attributes,
            "tags": list(r.tags),
        }
        for r in rows
    ]
    reply: dict[str, Any] = {"items": items, "next_cursor": cursor}
    if counts is not None:
        reply["counts"] = _counts(counts)
    return 200, reply


def count_workflows(request: Request) -> Reply:
    query = request.query
    group_by = query.get("group_by", "status")
    counts = request.engine.count(
        group_by,
        status=query.get("status"),
        workflow_type=query.get("workflow_type"),
        **_filters(query),
    )
    return 200, {"group_by": group_by, "counts": _counts(counts)}


def _counts(counts: dict[Any, int]) -> list[dict[str, Any]]:
    """Counts as the API lists them: ``{value, count}``, largest first."""
    ordered = sorted(counts.items(), key=lambda pair: (-pair[1], str(pair[0])))
    return [{"value": value, "count": n} for value, n in ordered]


def _filters(query: dict[str, Any]) -> dict[str, Any]:
    """The list filters of a query string: ``where`` is JSON, ``tags`` comma-separated."""
    where = None
    if "where" in query:
        try:
            where = json.loads(query["where"])
        except ValueError:
            raise InvalidFilterError("where must be a JSON object", "where") from None
    tags = query.get("tags")
    return {
        "where": where,
        "tags": None if tags is None else [t for t in tags.split(",") if t],
        "started_after": query.get("started_after"),
        "started_before": query.get("started_before"),
        "id_prefix": query.get("id_prefix"),
        "type_prefix": query.get("type_prefix"),
    }


def describe_workflow(request: Request) -> Reply:
    described = workflow_json(request.engine.describe(request.workflow_id, attempts=True))
    waiting = waiting_for(request.engine, request.workflow_id)  # a read-only replay
    described["waiting_for"] = None if waiting is None else waiting.as_json()
    return 200, described


def get_result(request: Request) -> Reply:
    description = wait_for(request, request.workflow_id, request.query.get("wait_seconds", 0.0))
    finished = description.is_terminal
    body = {
        "id": description.id,
        "status": description.status,
        "result": description.result,
        "error": description.error,
    }
    return (200 if finished else 202), body


def list_events(request: Request) -> Reply:
    limit = request.query.get("limit", 100)
    items = request.engine.events(
        request.workflow_id, after=request.query.get("after"), limit=limit
    )
    next_after = items[-1]["event_id"] if len(items) == limit else None
    return 200, {"items": items, "next_after": next_after}


def signal_workflow(request: Request) -> Reply:
    name, body = request.params["name"], request.body
    request.engine.signal(
        request.workflow_id, name, body.get("payload"), signal_id=body.get("signal_id")
    )
    status = request.engine.describe(request.workflow_id).status
    return 200, {"id": request.workflow_id, "signal": name, "status": status}


def update_workflow(request: Request) -> Reply:
    name, body = request.params["name"], request.body
    result = request.engine.update(
        request.workflow_id, name, body.get("payload"), update_id=body.get("update_id")
    )
    return 200, {"id": request.workflow_id, "update": name, "result": result}


def query_workflow(request: Request) -> Reply:
    name = request.params["name"]
    result = request.engine.query(request.workflow_id, name, request.body.get("arg"))
    return 200, {"id": request.workflow_id, "query": name, "result": result}


def cancel_workflow(request: Request) -> Reply:
    request.engine.cancel(request.workflow_id)  # a finished run is left as it is, unwritten
    description = request.engine.describe(request.workflow_id)
    if description.is_terminal and description.status != "cancelled":
        raise WorkflowNotRunningError(request.workflow_id, description.status)
    return 200, workflow_json(description)


def suspend_workflow(request: Request) -> Reply:
    request.engine.suspend(request.workflow_id)
    return describe_workflow(request)


def resume_workflow(request: Request) -> Reply:
    _require_unfinished(request)
    request.engine.resume(request.workflow_id)
    return describe_workflow(request)


def retry_workflow(request: Request) -> Reply:
    request.engine.retry(request.workflow_id)  # refused (400) unless the run failed
    return describe_workflow(request)


def purge_workflow(request: Request) -> Reply:
    request.engine.purge(request.workflow_id)  # refused (400) unless the run finished
    return 200, {"id": request.workflow_id, "purged": True}


def complete_activity(request: Request) -> Reply:
    request.engine.complete_activity(request.body["token"], request.body.get("result"))
    return 200, {"accepted": True}


def fail_activity(request: Request) -> Reply:
    body = request.body
    error: BaseException | str = body["message"]
    if "error_type" in body:
        error = type(body["error_type"], (Exception,), {})(body["message"])
    request.engine.fail_activity(body["token"], error)
    return 200, {"accepted": True}


def _instant(value: float | str | None, field: str) -> float | datetime.datetime | None:
    """Epoch seconds as they are, ISO 8601 text as a datetime (one without a zone is refused
    by the engine, naming ``field``)."""
    if not isinstance(value, str):
        return value
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        raise bad_request(field, f"{value!r} is not an ISO 8601 time") from None


def _require_unfinished(request: Request) -> None:
    """Refuse (409) a control call on a finished run, where the engine would be silent."""
    description = request.engine.describe(request.workflow_id)
    if description.is_terminal:
        raise WorkflowNotRunningError(request.workflow_id, description.status)
