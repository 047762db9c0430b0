"""What callers hold and read: ``WorkflowHandle``, ``WorkflowDescription`` (and the read
that makes one), ``WorkflowSummary``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from weft_serverless.codec import decode
from weft_serverless.engine.persistence.records import (
    CANCELLED,
    COMPLETED,
    FAILED,
    TERMINAL,
    TIMED_OUT,
    WorkflowState,
    load_history,
)
from weft_serverless.engine.persistence.retry_history import failed_attempts
from weft_serverless.engine.runs import concurrency, finalizers
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import (
    WeftError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowTimedOutError,
)
from weft_serverless.storage import keys


@dataclass(frozen=True, slots=True)
class WorkflowDescription:
    """A workflow's stored state, decoded."""

    id: str
    workflow_type: str
    version: str
    status: str
    created_at: float
    updated_at: float
    result: Any
    error: dict[str, Any] | None
    parent_id: str | None
    owner: dict[str, Any] | None = None
    input: Any = None
    failed_attempts: tuple[dict[str, Any], ...] | None = None
    run: int = 1  # 1, then one more per continue_as_new (same id, fresh history)
    concurrency_key: str | None = None
    """The key the run counts against its type's concurrency limit (None: no limit)."""
    teardown: dict[str, Any] | None = None
    """Its finalizers' teardown, if its end armed one: ``status`` (pending, running,
    completed), ``reason`` and per finalizer ``activity``, ``state`` (pending, done,
    dead-lettered), ``attempts``, ``last_error`` (ADR 0027)."""
    search_attributes: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    schedule_id: str | None = None
    """The schedule that started the run (a fire, a trigger or a backfill), if one did."""

    @classmethod
    def of(
        cls,
        state: WorkflowState,
        owner: dict[str, Any] | None = None,
        failed_attempts: list[dict[str, Any]] | None = None,
        teardown: dict[str, Any] | None = None,
    ) -> WorkflowDescription:
        return cls(
            id=state.id,
            workflow_type=state.type,
            version=state.version,
            status=state.status,
            created_at=state.created_at,
            updated_at=state.updated_at,
            result=None if state.result is None else decode(state.result),
            error=state.error,
            parent_id=(state.parent or {}).get("id"),
            owner=owner,
            input=decode(state.input),
            failed_attempts=None if failed_attempts is None else tuple(failed_attempts),
            run=state.run,
            concurrency_key=concurrency.key_of(state),
            teardown=teardown,
            search_attributes=dict(state.extra.get("sa") or {}),
            tags=tuple(state.extra.get("tags") or ()),
            schedule_id=state.schedule_id,
        )

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """One row of ``Engine.list``."""

    id: str
    workflow_type: str
    status: str
    created_at: float
    search_attributes: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


def describe(rt: Runtime, workflow_id: str, attempts: bool) -> WorkflowDescription:
    """The run's stored state (one point read); with ``attempts`` its whole partition."""
    if attempts:
        history = load_history(rt.storage, workflow_id)
        if history is None:
            raise WorkflowNotFoundError(workflow_id)
        state, failures = history.state, failed_attempts(history)
    else:
        data = rt.storage.get(keys.state_key(workflow_id))
        if data is None:
            raise WorkflowNotFoundError(workflow_id)
        state, failures = WorkflowState.from_bytes(data), None
    owner = rt.fence.owner_of(workflow_id)
    if state.result_apart:
        state.result = rt.storage.get(keys.result_key(workflow_id))
    teardown = None
    if state.status in finalizers.ENDS:  # only an end that runs finalizers has one to read
        teardown = finalizers.read_view(rt, workflow_id)
    return WorkflowDescription.of(state, owner, failures, teardown)


def outcome_of(description: WorkflowDescription) -> Any:
    """The result of a terminal workflow, or the error its ``result()`` raises."""
    if description.status == COMPLETED:
        return description.result
    if description.status == CANCELLED:
        raise WorkflowCancelledError(description.id)
    if description.status == TIMED_OUT:
        raise WorkflowTimedOutError(description.id)
    if description.status == FAILED:
        error = description.error or {}
        raise WorkflowFailedError(
            description.id,
            str(error.get("type", description.status)),
            str(error.get("message", "")),
        )
    raise WeftError(f"workflow {description.id!r} is {description.status}, not finished")


class HandleOwner(Protocol):
    """What a handle needs of the engine that made it: typed by shape, so this module does
    not import the facade that imports it."""

    @property
    def waits_in_background(self) -> bool: ...

    def describe(self, workflow_id: str) -> WorkflowDescription: ...

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None: ...

    def cancel(self, workflow_id: str) -> None: ...

    def _wait_for_change(self, remaining: float | None) -> None: ...


class WorkflowHandle:
    """A reference to one workflow run, by id."""

    def __init__(self, engine: HandleOwner, workflow_id: str) -> None:
        self._engine = engine
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.id!r})"

    def describe(self) -> WorkflowDescription:
        return self._engine.describe(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Return the result, or raise ``WorkflowFailedError`` / ``WorkflowCancelledError``.

        Raises ``TimeoutError`` if the run has not finished within ``timeout`` seconds. With
        ``background_tasks="manual"`` nothing advances the run while this waits except other
        engines, so ``timeout=None`` means "check now"; in automatic mode it means "wait".
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            description = self.describe()
            if description.is_terminal:
                return outcome_of(description)
            remaining = None if deadline is None else deadline - time.monotonic()
            if (remaining is not None and remaining <= 0) or (
                remaining is None and not self._engine.waits_in_background
            ):
                raise TimeoutError(
                    f"workflow {self.id!r} is still {description.status}; "
                    "drive it (run_maintenance) or wait longer"
                )
            self._engine._wait_for_change(remaining)

    def signal(self, name: str, payload: Any = None, *, signal_id: str | None = None) -> None:
        self._engine.signal(self.id, name, payload, signal_id=signal_id)

    def cancel(self) -> None:
        self._engine.cancel(self.id)
