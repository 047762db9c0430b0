"""The pieces routes are made of: fields (JSON Schema), routes, shared schemas and field sets.

The tables themselves are in ``routes`` (runs), ``schedule_routes`` and ``bulk_routes``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from weft_serverless import WORKFLOW_STATUSES as STATUSES
from weft_serverless.aws.schemas import (
    DOCUMENT_ONLY,
    EPOCH,
    ID,
    OPERATION_ID,
    PRINTABLE_NAME,
    SCHEDULE_ID,
    TAG_LIST,
    TAGS,
    Schema,
    documented,
)

MAX_BODY_BYTES = 1024 * 1024
"""Bodies above this are refused with a 413 before they are parsed."""
MAX_WAIT_SECONDS = 25.0
"""Longest ``wait_seconds``: API Gateway ends an integration after 29 s."""
MAX_CORRELATION_ID = 128
"""Longest ``X-Correlation-Id`` used as given; a longer one is replaced by the request id."""

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
    errors: tuple[int, ...] = (400, 404, 500, 503)
    payload_field: str | None = None
    body_rules: Schema | None = None
    """What the body's fields must satisfy together (JSON Schema), e.g. one of two."""

    @property
    def path_params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)

    @property
    def resolver_rule(self) -> str:
        """The path in powertools' syntax: ``/workflows/<workflow_id>``."""
        return re.sub(r"{(\w+)}", r"<\1>", self.path)


PATH_PARAMETERS: dict[str, Field] = {
    field.name: field
    for field in (
        Field("workflow_id", ID, "The workflow's id.", True),
        Field("schedule_id", SCHEDULE_ID, "The schedule's id.", True),
        Field("name", PRINTABLE_NAME, "The signal's, update's or query's name.", True),
        Field("operation_id", OPERATION_ID, "The bulk operation's id.", True),
    )
}
"""Every path parameter of the route table, checked (decoded) before the engine is called."""

_WAIT = Field(
    "wait_seconds",
    {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
    "Wait up to this long for the workflow to finish (bounded by the invocation's time).",
)
_NAME_ERRORS = (400, 404, 409, 413, 500, 503)
BULK_FILTERS: dict[str, Schema] = {
    "status": {"type": "string", "enum": list(STATUSES)},
    "workflow_type": {"type": "string", "minLength": 1},
    "where": {"type": "object"},
    "tags": TAGS,
    "started_after": EPOCH,
    "started_before": EPOCH,
    "id_prefix": {"type": "string", "minLength": 1},
    "type_prefix": {"type": "string", "minLength": 1},
    "order": {"type": "string", "enum": ["oldest", "newest"]},
}
"""The filters a bulk operation's ``filter`` object may hold: those of ``list``."""


def bulk_fields(kind: str) -> tuple[Field, ...]:
    """The body fields of a bulk operation of ``kind``: a retry acts on failed runs only, so
    its filter's ``status`` can only be ``failed``."""
    filters = dict(BULK_FILTERS)
    if kind == "retry":
        filters["status"] = {"type": "string", "enum": ["failed"]}
    return (
        Field(
            "filter",
            {
                "type": "object",
                DOCUMENT_ONLY: {
                    "properties": {name: documented(schema) for name, schema in filters.items()},
                    "additionalProperties": False,
                },
            },
            "The runs to act on: the filters of GET /workflows (status, workflow_type, where as "
            "an object, tags as a list, ...).",
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
    Field("tags", TAG_LIST, "Comma-separated tags, all required."),
    Field("started_after", EPOCH, "Started at or after (epoch seconds)."),
    Field("started_before", EPOCH, "Started before (epoch seconds)."),
    Field("id_prefix", {"type": "string", "minLength": 1}, "Only ids starting with this."),
    Field(
        "type_prefix",
        {"type": "string", "minLength": 1},
        "Only workflow types starting with this (read from the same index as workflow_type).",
    ),
)
