"""Checking what callers pass to the engine, with errors that name the argument."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from weft_serverless.commands import parse_duration
from weft_serverless.errors import ConfigurationError, InvalidArgumentError
from weft_serverless.identifiers import MAX_WORKFLOW_ID_BYTES, check_workflow_id
from weft_serverless.workflow import WorkflowDefinition

MAX_WORKFLOW_ID_LENGTH = MAX_WORKFLOW_ID_BYTES  # ASCII ids: characters are bytes
Duration = float | int | str | datetime.timedelta


def check_registry(workflows: Mapping[str, WorkflowDefinition]) -> None:
    if not isinstance(workflows, Mapping):
        raise ConfigurationError("workflows must be a mapping of name to workflow definition")
    for name, definition in workflows.items():
        if not isinstance(definition, WorkflowDefinition):
            raise ConfigurationError(
                f"workflows[{name!r}] is {type(definition).__name__}, not a WorkflowDefinition; "
                "build it with workflow(name).activities(...).execute(fn)"
            )
        if definition.name != name:
            raise ConfigurationError(
                f"workflows[{name!r}] holds the definition named {definition.name!r}; "
                "the key must equal the definition's name"
            )


def check_positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{field} must be a whole number of at least 1", field)
    return value


def check_id(workflow_id: Any, field: str = "workflow_id") -> str:
    return check_workflow_id(workflow_id, field)


def start_time(
    now: float, start_at: float | datetime.datetime | None, start_after: Duration | None
) -> float | None:
    if start_after is not None:
        return now + parse_duration(start_after, "start_after")
    if isinstance(start_at, datetime.datetime):
        if start_at.tzinfo is None:
            raise InvalidArgumentError("start_at must be timezone-aware (e.g. UTC)", "start_at")
        return start_at.timestamp()
    if start_at is not None and (
        isinstance(start_at, bool) or not isinstance(start_at, int | float)
    ):
        raise InvalidArgumentError(
            "start_at must be epoch seconds or an aware datetime", "start_at"
        )
    return None if start_at is None else float(start_at)
