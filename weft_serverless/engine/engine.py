"""The ``Engine`` facade: one object per process, each method handed to one of its parts.

``Engine.__init__`` builds the parts from the runtime and the session (``Starts``,
``Interactions``, ``RunControl``, ``AsyncActivities``, ``Schedules``, ``BulkActions``,
``RunSearch``); each holds what it needs, and each public method here is a one-line hand-off
to a part or to a concept module. Arguments are checked in ``config``; each method's full
contract (errors, costs, modes) is in docs/api.md, so the docstrings here only say what a
method is for.
"""

from __future__ import annotations

import builtins
import datetime
import functools
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from weft_serverless.engine import config, handle
from weft_serverless.engine.bulk import request
from weft_serverless.engine.bulk.operation import BulkOperation
from weft_serverless.engine.bulk.request import BulkPreview
from weft_serverless.engine.config import Duration, check_id
from weft_serverless.engine.handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from weft_serverless.engine.invocation import invocation_scope
from weft_serverless.engine.maintenance import MaintenanceReport
from weft_serverless.engine.ownership import Mode, Timing, mode_factory
from weft_serverless.engine.parts.async_activities import AsyncActivities
from weft_serverless.engine.parts.bulk import DEFAULT_PAGE, BulkActions
from weft_serverless.engine.parts.interactions import Interactions
from weft_serverless.engine.parts.run_control import RunControl
from weft_serverless.engine.parts.run_search import RunSearch, Time
from weft_serverless.engine.parts.schedules import Schedules
from weft_serverless.engine.parts.starts import Starts
from weft_serverless.engine.persistence.records import STATUSES
from weft_serverless.engine.process.activity_threads import DEFAULT_MAX_PARALLEL
from weft_serverless.engine.process.timer_hints import TimerHint, TimerHints
from weft_serverless.engine.runs import event_log
from weft_serverless.engine.runtime import (
    MAX_TIMERS_PER_PASS,
    BackgroundTasks,
    Runtime,
    assemble,
    wall_clock,
)
from weft_serverless.engine.schedules.handle import ScheduleHandle
from weft_serverless.engine.schedules.manage import ScheduleDescription
from weft_serverless.engine.schedules.spec import DEFAULT_CATCHUP_WINDOW
from weft_serverless.engine.session import Session
from weft_serverless.engine.timer_hints import TimerHintReport
from weft_serverless.errors import ConfigurationError
from weft_serverless.event_sink import EventSink
from weft_serverless.storage import shard_layout, shard_migration
from weft_serverless.storage.base import Storage
from weft_serverless.storage.shard_migration import DEFAULT_LONGEST_INVOCATION, ShardChange
from weft_serverless.workflow import WorkflowDefinition

P = ParamSpec("P")
R = TypeVar("R")


def _hinted(method: Callable[P, R]) -> Callable[P, R]:
    """A call that may arm timers: their hints are sent in batches when it returns (ADR 0054)."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        engine: Engine = args[0]  # type: ignore[assignment]
        with engine._rt.hints.scope():
            return method(*args, **kwargs)

    return call


class Engine:
    """Runs workflows durably on a ``Storage``. Build it with ``Engine.create``."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._session = session = Session(rt)
        self._interactions = Interactions(rt, session)
        self._starts = Starts(rt, session, self._interactions.signal)
        self._control = RunControl(rt, session)
        self._activities = AsyncActivities(rt, session)
        self._schedules = Schedules(rt, session, self.get_handle)
        self._bulk = BulkActions(rt, session)
        self._search = RunSearch(rt)

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
        shards: Mapping[str, int] | None = None,
        shards_refresh: float = shard_layout.DEFAULT_REFRESH,
        timer_hints: TimerHints | None = None,
    ) -> Engine:
        """Check every option, register workflows, then recover running ones (``recover``)."""
        config.check_registry(workflows)
        lease_timing = Timing(lease_ttl, lease_renew_interval)
        claim_timing = Timing(workflow_claim_ttl, workflow_claim_renew_interval)
        renew = config.check_engine_options(
            ownership, background_tasks, lease_timing, claim_timing, max_payload_bytes
        )
        requested = shard_layout.check_shards(shards)
        refresh = shard_layout.check_refresh(shards_refresh)
        clock = clock or wall_clock
        rt = assemble(
            storage,
            dict(workflows),
            ownership=mode_factory(ownership, lease_timing, claim_timing, lease_wait_timeout),
            clock=clock,
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
            layout=shard_layout.open_layout(storage, requested, clock(), STATUSES),
            shard_refresh=refresh,
            timer_hints=config.check_timer_hints(timer_hints),
        )
        rt.fence.bootstrap()
        engine = cls(rt)
        if recover:
            engine.recover_all()
        engine._session.start_background()
        return engine

    # -- starting runs, and reading one ----------------------------------------------------

    @_hinted
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
        return WorkflowHandle(
            self,
            self._starts.start(
                workflow_type,
                input,
                id,
                idempotency_key,
                execution_timeout,
                start_at,
                start_after,
                tags,
                search_attributes,
            ),
        )

    @_hinted
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
        return WorkflowHandle(
            self,
            self._starts.start_or_signal(
                workflow_type,
                input,
                id,
                signal,
                payload,
                signal_id,
                execution_timeout,
                tags,
                search_attributes,
            ),
        )

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        return WorkflowHandle(self, check_id(workflow_id))

    def describe(self, workflow_id: str, *, attempts: bool = False) -> WorkflowDescription:
        """The run's stored state; with ``attempts`` also its failed activity attempts."""
        return handle.describe(self._rt, check_id(workflow_id), attempts)

    def events(
        self, workflow_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The run's events in order, after the event id ``after`` (None: from its start).

        Each is ``{event_id, type, workflow_id, workflow_type, at, ...}``; ids are the same
        on every read, so the last id of a page is the ``after`` of the next.
        """
        return event_log.read(self._rt.storage, workflow_id, after, limit)

    # -- talking to a run: signals, updates, queries ---------------------------------------

    @_hinted
    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        """Deliver a signal (buffered until the workflow waits for it); a repeated id is a no-op."""
        self._interactions.signal(workflow_id, name, payload, signal_id)

    @_hinted
    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Apply an update where the workflow is parked and return its handler's result."""
        return self._interactions.update(workflow_id, name, payload, update_id, timeout)

    def query(self, workflow_id: str, name: str, arg: Any = None) -> Any:
        """Answer a query from the workflow's current state, read-only, on any engine."""
        return self._interactions.query(workflow_id, name, arg)

    # -- the operator's moves on a run, and recovery ---------------------------------------

    @_hinted
    def cancel(self, workflow_id: str) -> None:
        """Cancel a run; its ``result()`` then raises ``WorkflowCancelledError``."""
        self._control.cancel(workflow_id)

    @_hinted
    def suspend(self, workflow_id: str) -> None:
        """Pause a run until ``resume``; timers that fall due meanwhile are re-armed then."""
        self._control.suspend(workflow_id)

    @_hinted
    def resume(self, workflow_id: str) -> str:
        """Resume a suspended run, or drive a running one now; returns its status after."""
        return self._control.resume(workflow_id)

    @_hinted
    def retry(self, workflow_id: str) -> None:
        """Re-run a failed workflow from its last good step (the failed step runs again)."""
        self._control.retry(workflow_id)

    @_hinted
    def purge(self, workflow_id: str) -> None:
        """Delete a finished run now (its idempotency key stays taken); see ``retention``."""
        self._control.purge(workflow_id)

    @_hinted
    def recover_all(self) -> int:
        """Drive every running workflow from its stored history; returns how many."""
        return self._control.recover_all()

    def list_dead_letters(self, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """Finalizers that exhausted their retries (of one workflow id, or every one); they
        outlive purges of their runs, so an operator can act on them."""
        return self._control.dead_letters(workflow_id)

    def list_event_dead_letters(self, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """Events the event sink kept refusing, moved out of the outbox (of one workflow id,
        or every one): ``{event, tries, error, first_refused_at, at}`` each. Like finalizer
        dead letters they outlive purges of their runs."""
        return self._control.event_dead_letters(workflow_id)

    # -- activities completed outside the engine -------------------------------------------

    @_hinted
    def complete_activity(self, token: str, result: Any = None) -> None:
        """Complete an async activity with ``result`` (single use) and resume its workflow."""
        self._activities.complete(token, result)

    @_hinted
    def fail_activity(self, token: str, error: BaseException | str) -> None:
        """Fail an async activity attempt; the activity's retry policy decides what follows."""
        self._activities.fail(token, error)

    # -- schedules -------------------------------------------------------------------------

    @_hinted
    def schedule(
        self,
        schedule_id: str,
        workflow_type: str,
        input: Any = None,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup_window: Duration = DEFAULT_CATCHUP_WINDOW,
        jitter: Duration | None = None,
        start_at: float | datetime.datetime | None = None,
        end_at: float | datetime.datetime | None = None,
    ) -> ScheduleHandle:
        """Create a schedule that starts ``workflow_type`` runs on ``cron`` or ``every``."""
        return self._schedules.create(
            schedule_id,
            workflow_type,
            input,
            cron=cron,
            every=every,
            timezone=timezone,
            overlap=overlap,
            catchup_window=catchup_window,
            jitter=jitter,
            start_at=start_at,
            end_at=end_at,
        )

    def get_schedule(self, schedule_id: str) -> ScheduleHandle:
        """A handle on an existing schedule (``ScheduleNotFoundError`` if there is none)."""
        return self._schedules.get(schedule_id)

    def list_schedules(self) -> list[ScheduleDescription]:
        """Every schedule, in id order."""
        return self._schedules.list_all()

    # -- bulk operations on the runs a filter matches (ADR 0031) ---------------------------

    @_hinted
    def cancel_all(
        self,
        *,
        dry_run: bool = False,
        confirm: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        caller: str | None = None,
        page_size: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> BulkPreview | BulkOperation:
        """Cancel every run the filters match (dry run first; see docs/api.md)."""
        return self._bulk.start(
            request.CANCEL, filters, dry_run, confirm, reason, actor, caller, page_size
        )

    @_hinted
    def signal_all(
        self,
        name: str,
        payload: Any = None,
        *,
        dry_run: bool = False,
        confirm: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        caller: str | None = None,
        page_size: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> BulkPreview | BulkOperation:
        """Signal every run the filters match, once each (``signal_id`` ``bulk-<id>``)."""
        return self._bulk.start(
            request.SIGNAL,
            filters,
            dry_run,
            confirm,
            reason,
            actor,
            caller,
            page_size,
            name,
            payload,
        )

    @_hinted
    def retry_failed_all(
        self,
        *,
        dry_run: bool = False,
        confirm: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        caller: str | None = None,
        page_size: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> BulkPreview | BulkOperation:
        """Retry every failed run the filters match (``status`` is ``failed``)."""
        return self._bulk.start(
            request.RETRY, filters, dry_run, confirm, reason, actor, caller, page_size
        )

    @_hinted
    def resume_bulk(self, operation_id: str) -> BulkOperation:
        """Carry a stored operation on from its cursor (a no-op once completed)."""
        return self._bulk.resume(operation_id)

    def describe_bulk(self, operation_id: str) -> BulkOperation:
        """A bulk operation's record: its audit fields, counts and progress."""
        return self._bulk.describe(operation_id)

    def list_bulk_operations(self) -> list[BulkOperation]:
        """Every bulk operation, oldest first; they outlive the runs they acted on."""
        return self._bulk.list_all()

    # -- the engine's own life: invocations, maintenance, shutdown -------------------------

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

    @_hinted
    def run_maintenance(
        self,
        now: float | None = None,
        *,
        budget_seconds: float | None = None,
        max_timers: int = MAX_TIMERS_PER_PASS,
        worker: int = 0,
        workers: int = 1,
        parallel_fires: int = 1,
    ) -> MaintenanceReport:
        """One pass: fire up to ``max_timers`` timers due at ``now`` and drive what they wake.

        ``worker`` of ``workers`` reads only the timer, claim and outbox shards ``s`` with
        ``s % workers == worker``, so that many workers share a store's firing (each fenced
        write keeps overlapping shares safe). ``parallel_fires`` runs fire at once, each on
        its own thread: worth it where each request waits on the network (ADR 0055).
        """
        return self._session.maintain(
            now, budget_seconds, max_timers, (worker, workers), parallel_fires
        )

    def change_shards(
        self,
        shards: Mapping[str, int] | None = None,
        *,
        longest_invocation: float = DEFAULT_LONGEST_INVOCATION,
        wait: bool = True,
        sleep: Callable[[float], None] | None = None,
    ) -> ShardChange:
        """Change the store's shard counts live (ADR 0050): ``shards`` over its counts
        (unlisted indexes keep theirs; None carries on with a change under way).

        Each phase begins ``shards_refresh`` plus ``longest_invocation`` seconds after the
        previous one, so every engine serving the store has seen it; with ``wait`` this
        sleeps (``sleep``, default ``time.sleep``) until the change is done, else it does
        what is due now and reports where the change stands. Resumable and idempotent: called
        again after a crash, by any process, it carries on from the phase in the marker.
        Every engine serving the store must re-read the marker at least as often as this
        one (``shards_refresh``). Bad counts raise ``ConfigurationError`` before any write.
        """
        live = self._rt.layout
        target = shard_migration.target_counts(live.reread(), shards)
        settle = live.refresh + shard_migration.check_settle(longest_invocation)
        if not math.isfinite(settle):
            raise ConfigurationError(
                "an engine that never re-reads its shard counts cannot change them"
            )
        pause = sleep or time.sleep
        while True:
            now = self._rt.now()
            change = shard_migration.advance(self._rt.storage, target, now, settle, STATUSES)
            live.reread()
            if change.done or not wait or change.next_at is None:
                return change
            pause(max(0.0, change.next_at - now))

    @_hinted
    def fire_timer_hints(
        self, hints: Sequence[TimerHint], *, wait: Callable[[float], None] = time.sleep
    ) -> TimerHintReport:
        """Fire the due timers ``hints`` name (the stored timer decides; ADR 0054)."""
        return self._session.fire_hints(hints, wait)

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

    # -- finding runs (ADR 0030); last, as ``def list`` hides the builtin below it ---------

    def list(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        *,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        order: str = "oldest",
        type_prefix: str | None = None,
    ) -> builtins.list[WorkflowSummary]:
        """Runs passing every filter, oldest (or ``order="newest"``) first; ``where`` maps a
        search attribute to a value or ``(operator, value)`` (see ``list_page`` for paging)."""
        return self._search.page(
            limit,
            None,
            status=status,
            workflow_type=workflow_type,
            where=where,
            tags=tags,
            started_after=started_after,
            started_before=started_before,
            id_prefix=id_prefix,
            order=order,
            type_prefix=type_prefix,
        )[0]

    def list_page(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        order: str = "oldest",
        type_prefix: str | None = None,
    ) -> tuple[builtins.list[WorkflowSummary], str | None]:
        """One page of ``list`` and the cursor of the next page (None when done); pass the
        same filters with the cursor."""
        return self._search.page(
            limit,
            cursor,
            status=status,
            workflow_type=workflow_type,
            where=where,
            tags=tags,
            started_after=started_after,
            started_before=started_before,
            id_prefix=id_prefix,
            order=order,
            type_prefix=type_prefix,
        )

    def list_page_with_counts(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        order: str = "oldest",
        type_prefix: str | None = None,
    ) -> tuple[builtins.list[WorkflowSummary], str | None, dict[str, int]]:
        """``list_page`` and ``count("status")`` of the same filters but the status, from
        one read of the index: a page of runs beside the count of each status."""
        return self._search.counted_page(
            limit,
            cursor,
            status=status,
            workflow_type=workflow_type,
            where=where,
            tags=tags,
            started_after=started_after,
            started_before=started_before,
            id_prefix=id_prefix,
            order=order,
            type_prefix=type_prefix,
        )

    def count(
        self,
        group_by: str = "status",
        *,
        status: str | None = None,
        workflow_type: str | None = None,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        type_prefix: str | None = None,
    ) -> dict[Any, int]:
        """How many runs pass the filters, per ``status``, ``workflow_type`` or value of a
        search attribute (runs without it count under ``None``)."""
        return self._search.count(
            group_by,
            status=status,
            workflow_type=workflow_type,
            where=where,
            tags=tags,
            started_after=started_after,
            started_before=started_before,
            id_prefix=id_prefix,
            type_prefix=type_prefix,
        )
