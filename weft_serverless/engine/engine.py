"""The ``Engine`` facade: one object per process, each method handed to a one-concern module."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from weft_serverless.errors import (
    ConfigurationError,
    InvalidArgumentError,
    WorkflowNotFoundError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.workflow import WorkflowDefinition

from . import lifecycle, signals
from .background import BackgroundDriver
from .dispatch import Dispatcher
from .driver import drive
from .handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from .maintenance import Budget, MaintenanceReport, run_maintenance
from .records import RUNNING, STATUSES, WorkflowState
from .runtime import BackgroundTasks, Runtime, payload_limit, wall_clock

Ownership = Literal["none", "lease", "workflow-lease"]
MAX_WORKFLOW_ID_LENGTH = 256


class Engine:
    """Runs workflows durably on a ``Storage``. Build it with ``Engine.create``."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._dispatcher = Dispatcher(rt, self._drive)
        self._background: BackgroundDriver | None = None

    @classmethod
    def create(
        cls,
        storage: Storage,
        workflows: Mapping[str, WorkflowDefinition],
        *,
        ownership: Ownership = "none",
        background_tasks: BackgroundTasks = "automatic",
        recover: bool = True,
        clock: Callable[[], float] | None = None,
        activities: Mapping[str, Callable[..., Any]] | None = None,
        max_payload_bytes: int | None = None,
        engine_id: str | None = None,
    ) -> Engine:
        """Register workflows, then recover running ones (``recover=True``).

        ``background_tasks="manual"`` starts no thread: calls that wake a workflow drive it
        inline, and the host calls ``run_maintenance()`` to fire timers (the serverless
        profile). ``"automatic"`` runs a small background driver for long-lived processes.
        """
        _check_registry(workflows)
        if background_tasks not in ("manual", "automatic"):
            raise ConfigurationError(
                f"background_tasks must be 'manual' or 'automatic', got {background_tasks!r}"
            )
        if ownership != "none":
            raise ConfigurationError(
                f"ownership={ownership!r} is not available in this build; use 'none'"
            )
        if max_payload_bytes is not None and max_payload_bytes <= 0:
            raise ConfigurationError("max_payload_bytes must be a positive number of bytes")
        rt = Runtime(
            storage=storage,
            definitions=dict(workflows),
            activity_overrides=activities if activities is not None else {},
            clock=clock or wall_clock,
            background_tasks=background_tasks,
            max_payload_bytes=payload_limit(storage, max_payload_bytes),
            engine_id=engine_id or uuid.uuid4().hex,
        )
        engine = cls(rt)
        if recover:
            engine.recover_all()
        if background_tasks == "automatic":
            engine._background = BackgroundDriver(rt, engine._dispatcher)
            engine._background.start()
        return engine

    # -- starting and reading ---------------------------------------------------------------

    def start(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        id: str | None = None,
        idempotency_key: str | None = None,
    ) -> WorkflowHandle:
        """Start a run; drive it inline in manual mode until it parks or finishes."""
        self._check_open()
        workflow_id = _check_id(id) if id is not None else uuid.uuid4().hex
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
        ):
            raise InvalidArgumentError("idempotency_key must be a non-empty string")
        encoded = self._rt.encode_payload(input, "workflow input")
        state = lifecycle.new_state(
            self._rt, workflow_type, workflow_id, encoded, idempotency_key=idempotency_key
        )
        started = lifecycle.start_workflow(self._rt, state)
        self._wake(started)
        return WorkflowHandle(self, started)

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        return WorkflowHandle(self, _check_id(workflow_id))

    def describe(self, workflow_id: str) -> WorkflowDescription:
        data = self._rt.storage.get(keys.state_key(_check_id(workflow_id)))
        if data is None:
            raise WorkflowNotFoundError(workflow_id)
        return WorkflowDescription.of(WorkflowState.from_bytes(data))

    def list(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
    ) -> list[WorkflowSummary]:
        """Workflows by status and type, oldest first, read from the sharded status index."""
        if status is not None and status not in STATUSES:
            raise InvalidArgumentError(
                f"status must be one of {', '.join(STATUSES)}; got {status!r}"
            )
        if limit < 1:
            raise InvalidArgumentError("limit must be >= 1")
        from weft_serverless.codec import decode

        rows: list[WorkflowSummary] = []
        for each_status in [status] if status else list(STATUSES):
            for shard in range(keys.STATUS_SHARDS):
                partition = keys.status_partition(each_status, shard)
                for sort, value in self._rt.storage.scan(partition):
                    wf_type = decode(value)["type"]
                    if workflow_type is not None and wf_type != workflow_type:
                        continue
                    created = int(sort.split("#", 1)[0]) / 1000.0
                    rows.append(
                        WorkflowSummary(keys.status_entry_id(sort), wf_type, each_status, created)
                    )
        rows.sort(key=lambda row: (row.created_at, row.id))
        return rows[:limit]

    # -- talking to runs ------------------------------------------------------------------------

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        """Deliver a signal (buffered until the workflow waits for it); a repeated id is a no-op."""
        self._check_open()
        if signals.deliver(self._rt, _check_id(workflow_id), name, payload, signal_id):
            self._wake(workflow_id)

    def cancel(self, workflow_id: str) -> None:
        """Cancel a run; its ``result()`` then raises ``WorkflowCancelledError``."""
        self._check_open()
        state = lifecycle.cancel(self._rt, _check_id(workflow_id))
        if state.parent:
            self._wake(state.parent["id"])

    # -- recovery and maintenance ---------------------------------------------------------------

    def recover_all(self) -> int:
        """Drive every running workflow from its stored history; returns how many."""
        ids = [row.id for row in self.list(status=RUNNING, limit=10**9)]
        for workflow_id in ids:
            self._dispatcher.enqueue(workflow_id)
        if self._rt.background_tasks == "manual":
            self._dispatcher.drain(swallow_errors=True)
        return len(ids)

    def run_maintenance(
        self, now: float | None = None, *, budget_seconds: float | None = None
    ) -> MaintenanceReport:
        """Fire every timer due at ``now`` once and drive what it wakes; report what was done."""
        self._check_open()
        deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
        return run_maintenance(self._rt, self._dispatcher, now, Budget(deadline))

    def close(self) -> None:
        """Stop background work; the storage stays open (it belongs to the caller)."""
        if self._background is not None:
            self._background.stop()
            self._background = None
        self._rt.closed = True

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals used by handles ------------------------------------------------------------

    @property
    def waits_in_background(self) -> bool:
        return self._background is not None

    @property
    def runtime(self) -> Runtime:
        return self._rt

    def _wait_for_change(self, remaining: float | None) -> None:
        pause = 0.2 if remaining is None else max(0.0, min(remaining, 0.2))
        with self._rt.terminal_changed:
            self._rt.terminal_changed.wait(pause)

    def _drive(self, workflow_id: str) -> object:
        status = drive(self._rt, workflow_id, self._dispatcher.enqueue)
        with self._rt.terminal_changed:
            self._rt.terminal_changed.notify_all()
        return status

    def _wake(self, workflow_id: str) -> None:
        self._dispatcher.enqueue(workflow_id)
        if self._rt.background_tasks == "manual":
            self._dispatcher.drain()

    def _check_open(self) -> None:
        if self._rt.closed:
            raise ConfigurationError("this engine is closed; create a new one")


def _check_registry(workflows: Mapping[str, WorkflowDefinition]) -> None:
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


def _check_id(workflow_id: Any) -> str:
    if not isinstance(workflow_id, str) or not workflow_id:
        raise InvalidArgumentError("workflow id must be a non-empty string")
    if len(workflow_id) > MAX_WORKFLOW_ID_LENGTH:
        raise InvalidArgumentError(
            f"workflow id is {len(workflow_id)} characters, over {MAX_WORKFLOW_ID_LENGTH}"
        )
    if not workflow_id.isprintable():
        raise InvalidArgumentError("workflow id must not contain control characters")
    return workflow_id
