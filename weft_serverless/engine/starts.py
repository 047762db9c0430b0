"""Turning a start call's arguments into the state of a new run, checked before any write."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from . import lifecycle
from .config import Duration, check_id, start_options
from .records import WorkflowState
from .runtime import Runtime


def new_state(
    rt: Runtime,
    workflow_type: str,
    input: Any,
    workflow_id: str | None,
    idempotency_key: str | None = None,
    execution_timeout: Duration | None = None,
    start_at: float | datetime.datetime | None = None,
    start_after: Duration | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> WorkflowState:
    """The run to create: options checked, input encoded, id checked or made up."""
    options = start_options(rt.now(), idempotency_key, execution_timeout, start_at, start_after)
    encoded = rt.encode_payload(input, "workflow input")
    return lifecycle.new_state(
        rt,
        workflow_type,
        check_id(workflow_id, "id") if workflow_id is not None else uuid.uuid4().hex,
        encoded,
        idempotency_key=options.idempotency_key,
        start_at=options.start_at,
        execution_timeout=options.execution_timeout,
        search_attributes=search_attributes,
        tags=tags,
    )
