"""Starting runs: a start call's arguments turned into the state of a new run, checked before
any write, then stored and woken. ``Engine.start`` and ``start_or_signal`` hand off to the
engine's ``Starts`` part.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from weft_serverless.engine.config import Duration, check_id, start_options
from weft_serverless.engine.persistence.records import RUNNING, WorkflowState
from weft_serverless.engine.runs import signals, starting
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.session import Session
from weft_serverless.errors import WorkflowAlreadyExistsError

Signal = Callable[[str, str, Any, str | None], None]
"""The engine's ``signal`` (workflow id, name, payload, signal id)."""


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
    return starting.new_state(
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


class Starts:
    """``start`` and ``start_or_signal``, each returning the id of the run it started (or
    found); ``signal`` is the engine's, for ``start_or_signal`` on a run that exists."""

    def __init__(self, rt: Runtime, session: Session, signal: Signal) -> None:
        self._rt = rt
        self._session = session
        self._signal = signal

    def start(
        self,
        workflow_type: str,
        input: Any,
        id: str | None,
        idempotency_key: str | None,
        execution_timeout: Duration | None,
        start_at: float | datetime.datetime | None,
        start_after: Duration | None,
        tags: Iterable[str] | None,
        search_attributes: Mapping[str, Any] | None,
    ) -> str:
        self._session.opened()
        state = new_state(
            self._rt,
            workflow_type,
            input,
            id,
            idempotency_key,
            execution_timeout,
            start_at,
            start_after,
            search_attributes,
            tags,
        )
        started = starting.start_workflow(self._rt, state)
        if state.status == RUNNING:
            self._session.wake(started, "start")
        return started

    def start_or_signal(
        self,
        workflow_type: str,
        input: Any,
        id: str,
        signal: str,
        payload: Any,
        signal_id: str | None,
        execution_timeout: Duration | None,
        tags: Iterable[str] | None,
        search_attributes: Mapping[str, Any] | None,
    ) -> str:
        self._session.opened()
        state = new_state(
            self._rt,
            workflow_type,
            input,
            id,
            None,
            execution_timeout,
            None,
            None,
            search_attributes,
            tags,
        )
        ops = signals.delivery_ops(self._rt, state.id, signal, payload, signal_id)
        try:
            starting.start_workflow(self._rt, state, ops)
            self._session.wake(state.id, "start")
        except WorkflowAlreadyExistsError:
            self._signal(state.id, signal, payload, signal_id)
        return state.id
