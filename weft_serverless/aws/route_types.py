"""The pieces routes are made of: fields (JSON Schema), routes, shared schemas and field sets.

The tables themselves are in ``routes`` (runs), ``schedule_routes`` and ``bulk_routes``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from weft_serverless import MAX_WORKFLOW_ID_BYTES

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
    Field(
        "type_prefix",
        {"type": "string", "minLength": 1},
        "Only workflow types starting with this (read from the same index as workflow_type).",
    ),
)
