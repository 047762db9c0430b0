"""One operation of the OpenAPI document: a route's parameters, request body and responses.

Each value's schema is the one the server checks, as ``schemas.documented`` states it (never
looser, ADR 0041); a success response carries the links of ``openapi_links``.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.aws.openapi_links import links_of
from weft_serverless.aws.route_types import PATH_PARAMETERS, Route
from weft_serverless.aws.schemas import Schema, documented

STATUS_TEXT = {
    200: "OK",
    201: "Started; the workflow as it stands after the inline drive (and the wait).",
    202: "Still running; poll again or wait longer.",
    400: "Bad input: `field` names it (an update validator's findings are in `issues`).",
    404: "No such workflow or activity token.",
    409: "The workflow's state does not allow this now; retry when `retryable` is true.",
    413: "A payload (or the whole body) is over the size limit; `field` names it.",
    422: "The update handler raised; nothing was stored.",
    429: "The workflow type's concurrency limit for this key is reached; nothing was stored. "
    "`workflow_type`, `key` and `limit` say which; retry after a run of that key ends.",
    500: "Unexpected failure; nothing about it is revealed here (see the logs).",
    503: "Storage unavailable or throttled, or a record was written by a newer release "
    "(`UnsupportedSchemaVersionError`); retry with the same ids.",
}


def operation(route: Route) -> dict[str, Any]:
    """The OpenAPI operation of ``route``: its parameters, body and responses, each value's
    schema as ``schemas.documented`` states it."""
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": PATH_PARAMETERS[name].description,
            "schema": documented(PATH_PARAMETERS[name].schema, PATH_PARAMETERS[name].description),
        }
        for name in route.path_params
    ]
    parameters += [
        {"name": f.name, "in": "query", "description": f.description}
        | {"schema": documented(f.schema)}
        for f in route.query
    ]
    parameters.append({"$ref": "#/components/parameters/CorrelationId"})
    operation: dict[str, Any] = {
        "operationId": route.operation,
        "summary": route.summary,
        "parameters": parameters,
    }
    if route.body is not None:
        schema: Schema = {
            "type": "object",
            "properties": {f.name: documented(f.schema, f.description) for f in route.body},
            "additionalProperties": False,
            **(route.body_rules or {}),
        }
        required = [f.name for f in route.body if f.required]
        if required:
            schema["required"] = required
        operation["requestBody"] = {
            "required": bool(required),
            "content": {"application/json": {"schema": schema}},
        }
    responses: dict[str, Any] = {}
    for status in route.success:
        responses[str(status)] = _response(status, route.response, links_of(route, status))
    for status in route.errors:
        responses[str(status)] = _response(status, "Error")
    operation["responses"] = responses
    return operation


def _response(status: int, schema: str, links: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        **({"links": links} if links else {}),
        "description": STATUS_TEXT[status],
        "headers": {"X-Correlation-Id": {"$ref": "#/components/headers/CorrelationId"}},
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }
