"""The ``Engine`` facade: one object per process, each method handed to a one-concern module.

Arguments are checked in ``config``; each method's full contract (errors, costs, modes) is
in docs/api.md, so the docstrings here only say what a method is for.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from weft_serverless.errors import WorkflowAlreadyExistsError
from weft_serverless.event_sink import EventSink
from weft_serverless.storage.base import Storage
from weft_serverless.workflow import WorkflowDefinition

from . import config, handle, lifecycle, signals, starts
from .activity_moves import ActivityMoves
from .activity_threads import DEFAULT_MAX_PARALLEL
from .bulk_moves import BulkMoves
from .config import Duration, check_id
from .event_reads import EventReads
from .handle import WorkflowDescription, WorkflowHandle
from .interaction_moves import InteractionMoves
from .invocation import invocation_scope
from .maintenance import MaintenanceReport
from .operator_moves import OperatorMoves
from .ownership import Mode, Timing, mode_factory
from .records import RUNNING
from .runtime import MAX_TIMERS_PER_PASS, BackgroundTasks, Runtime, assemble, wall_clock
from .schedule_moves import ScheduleMoves
from .session import Session
from .visibility_moves import VisibilityMoves


class Engine(
    InteractionMoves,
    OperatorMoves,
    ScheduleMoves,
    ActivityMoves,
    EventReads,
    BulkMoves,
    VisibilityMoves,
):
    """Runs workflows durably on a ``Storage``. Build it with ``Engine.create``."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._session = Session(rt)

    @classmethod
    def create(
        cls,
        storage: Storage,
        workflows: Mapping[str, WorkflowDefinition],
        *,
        ownership: Mode = "none",
        background_tasks: BackgroundTasks = "automatic",
        recover: bool = True,
        clock: Callable[[], float] | None = None,
        activities: Mapping[str, Callable[..., Any]] | None = None,
        max_payload_bytes: int | None = None,
        engine_id: str | None = None,
        lease_ttl: float = 30.0,
        lease_renew_interval: float = 5.0,
        lease_wait_timeout: float = 0.0,
        workflow_claim_ttl: float = 30.0,
        workflow_claim_renew_interval: float = 5.0,
        retention: Mapping[str, Duration] | None = None,
        max_clock_skew: float | None = None,
        max_parallel_activities: int = DEFAULT_MAX_PARALLEL,
        services: Callable[[], Mapping[str, Any]] | None = None,
        events: EventSink | None = None,
        tracer: Any = None,
    ) -> Engine:
        """Check every option, register workflows, then recover running ones (``recover``)."""
        config.check_registry(workflows)
        lease_timing = Timing(lease_ttl, lease_renew_interval)
        claim_timing = Timing(workflow_claim_ttl, workflow_claim_renew_interval)
        renew = config.check_engine_options(
            ownership, background_tasks, lease_timing, claim_timing, max_payload_bytes
        )
        rt = assemble(
            storage,
            dict(workflows),
            ownership=mode_factory(ownership, lease_timing, claim_timing, lease_wait_timeout),
            clock=clock or wall_clock,
            activity_overrides=activities,
            background_tasks=background_tasks,
            max_payload_bytes=max_payload_bytes,
            engine_id=engine_id or uuid.uuid4().hex,
            retention=config.parse_retention(retention),
            clock_skew=config.clock_skew_limit(max_clock_skew, renew),
            max_parallel_activities=config.check_parallel_activities(max_parallel_activities),
            services=config.check_services(services, workflows),
            events=config.check_event_sink(events),
            tracer=config.check_tracer(tracer),
        )
        rt.fence.bootstrap()
        engine = cls(rt)
        if recover:
            engine.recover_all()
        engine._session.start_background()
        return engine

    def start(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        id: str | None = None,
        idempotency_key: str | None = None,
        execution_timeout: Duration | None = None,
        start_at: float | datetime.datetime | None = None,
        start_after: Duration | None = None,
        tags: Iterable[str] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> WorkflowHandle:
        """Start a run and, in manual mode, drive it inline until it parks or finishes."""
        self._open()
        state = starts.new_state(
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
        started = lifecycle.start_workflow(self._rt, state)
        if state.status == RUNNING:
            self._session.wake(started, "start")
        return WorkflowHandle(self, started)

    def start_or_signal(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        id: str,
        signal: str,
        payload: Any = None,
        signal_id: str | None = None,
        execution_timeout: Duration | None = None,
        tags: Iterable[str] | None = None,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> WorkflowHandle:
        """Signal the run ``id``, starting it first (with the signal buffered) if absent."""
        self._open()
        state = starts.new_state(
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
            lifecycle.start_workflow(self._rt, state, ops)
            self._session.wake(state.id, "start")
        except WorkflowAlreadyExistsError:
            self.signal(state.id, signal, payload, signal_id=signal_id)
        return WorkflowHandle(self, state.id)

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        return WorkflowHandle(self, check_id(workflow_id))

    def describe(self, workflow_id: str, *, attempts: bool = False) -> WorkflowDescription:
        """The run's stored state; with ``attempts`` also its failed activity attempts."""
        return handle.describe(self._rt, check_id(workflow_id), attempts)

    @contextmanager
    def invocation(
        self,
        *,
        time_left: Callable[[], float] | None = None,
        deadline: float | None = None,
        step_reserve: float = 1.0,
        heartbeat: bool = True,
    ) -> Iterator[Engine]:
        """Scope one serverless invocation: no step starts with under ``step_reserve`` s left."""
        with invocation_scope(self._rt, time_left, deadline, step_reserve, heartbeat):
            yield self

    def run_maintenance(
        self,
        now: float | None = None,
        *,
        budget_seconds: float | None = None,
        max_timers: int = MAX_TIMERS_PER_PASS,
    ) -> MaintenanceReport:
        """One pass: fire up to ``max_timers`` timers due at ``now`` and drive what they wake."""
        self._open()
        return self._session.maintain(now, budget_seconds, max_timers)

    def close(self) -> None:
        """Stop background work; the storage stays open (it belongs to the caller)."""
        self._session.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def waits_in_background(self) -> bool:
        return self._session.background is not None

    @property
    def runtime(self) -> Runtime:
        return self._rt

    def _wait_for_change(self, remaining: float | None) -> None:
        self._session.wait_for_change(remaining)

    def _open(self, workflow_id: str | None = None) -> str:
        """Refuse a closed engine; check ``workflow_id`` when given (returned as is)."""
        self._session.check_open()
        return "" if workflow_id is None else check_id(workflow_id)
