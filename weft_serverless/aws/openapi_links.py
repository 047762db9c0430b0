"""The OpenAPI links: which response names the object that other operations take by id.

A start answers with the run (``id``), a schedule's creation with the schedule, a confirmed
bulk operation with its record, and each list with a page of them. The document says so as
links from those responses to every operation whose path takes that id, so a client (and a
fuzzer's stateful phase) can follow a run from its start to its signals, cancel and purge.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.aws.route_types import Route
from weft_serverless.aws.routes import ROUTES

SOURCES: dict[str, tuple[str, str]] = {
    "start_workflow": ("workflow_id", "$response.body#/id"),
    "list_workflows": ("workflow_id", "$response.body#/items/0/id"),
    "trigger_schedule": ("workflow_id", "$response.body#/workflow_id"),
    "create_schedule": ("schedule_id", "$response.body#/id"),
    "list_schedules": ("schedule_id", "$response.body#/items/0/id"),
    "bulk_cancel": ("operation_id", "$response.body#/id"),
    "bulk_signal": ("operation_id", "$response.body#/id"),
    "bulk_retry": ("operation_id", "$response.body#/id"),
    "list_bulk": ("operation_id", "$response.body#/items/0/id"),
}
"""Operation -> (the path parameter its success response gives, where in the body)."""


def links_of(route: Route, status: int) -> dict[str, Any]:
    """The links of ``route``'s success response ``status``: one per operation that takes
    the id it gives (and no other path parameter)."""
    if route.operation not in SOURCES or status != route.success[0]:
        return {}
    parameter, expression = SOURCES[route.operation]
    return {
        target.operation: {
            "operationId": target.operation,
            "parameters": {parameter: expression},
        }
        for target in ROUTES
        if target.path_params == [parameter]
    }
