"""The ``Engine`` facade: one object per process, each method handed to a one-concern module.

Arguments are checked in ``config``; each method's full contract (errors, costs, modes) is
in docs/api.md, so the docstrings here only say what a method is for.
"""

from __future__ import annotations

import builtins
import datetime
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from weft_serverless.errors import (
    ConfigurationError,
    WeftError,
    WorkflowAlreadyExistsError,
)
from weft_serverless.storage.base import Storage
from weft_serverless.workflow import WorkflowDefinition

from . import control, handle, interactions, lifecycle, listing, signals, starts
from . import retention as retention_mod
from .background import BackgroundDriver
from .config import (
    Duration,
    check_engine_options,
    check_id,
    check_positive_int,
    check_registry,
    clock_skew_limit,
    parse_retention,
)
from .dispatch import Dispatcher
from .handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from .invocation import invocation_scope
from .maintenance import MaintenanceReport, run_maintenance
from .ownership import Mode, Timing, mode_factory
from .records import RUNNING, STATUSES, SUSPENDED
from .runtime import (
    MAX_TIMERS_PER_PASS,
    BackgroundTasks,
    Budget,
    Runtime,
    assemble,
    logger,
    wall_clock,
)


class Engine:
    """Runs workflows durably on a ``Storage``. Build it with ``Engine.create``."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._dispatcher = Dispatcher(rt)
        self._background: BackgroundDriver | None = None

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
    ) -> Engine:
        """Register workflows, then recover running ones (``recover=True``).

        Every option is checked before anything is read (``config``); docs/api.md lists them:
        ``background_tasks="manual"`` is the serverless profile, ``ownership`` picks who may
        write a workflow (``"workflow-lease"`` for Lambda).
        """
        check_registry(workflows)
        lease_timing = Timing(lease_ttl, lease_renew_interval)
        claim_timing = Timing(workflow_claim_ttl, workflow_claim_renew_interval)
        check_engine_options(
            ownership=ownership,
            background_tasks=background_tasks,
            lease_timing=lease_timing,
            claim_timing=claim_timing,
            max_payload_bytes=max_payload_bytes,
        )
        timing = {"lease": lease_timing, "workflow-lease": claim_timing}.get(ownership)
        renew = None if timing is None else timing.renew_interval
        rt = assemble(
            storage,
            dict(workflows),
            ownership=mode_factory(ownership, lease_timing, claim_timing, lease_wait_timeout),
            clock=clock or wall_clock,
            activity_overrides=activities,
            background_tasks=background_tasks,
            max_payload_bytes=max_payload_bytes,
            engine_id=engine_id or uuid.uuid4().hex,
            retention=parse_retention(retention),
            clock_skew=clock_skew_limit(max_clock_skew, renew),
        )
        rt.fence.bootstrap()
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
        execution_timeout: Duration | None = None,
        start_at: float | datetime.datetime | None = None,
        start_after: Duration | None = None,
    ) -> WorkflowHandle:
        """Start a run; drive it inline in manual mode until it parks or finishes (once the
        start has committed, a failed inline drive is logged and left to maintenance)."""
        self._check_open()
        state = starts.new_state(
            self._rt,
            workflow_type,
            input,
            id,
            idempotency_key,
            execution_timeout,
            start_at,
            start_after,
        )
        started = lifecycle.start_workflow(self._rt, state)
        if state.status == RUNNING:
            self._wake(started, "start")
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
    ) -> WorkflowHandle:
        """Signal the run ``id``, starting it first (with the signal buffered) if absent."""
        self._check_open()
        state = starts.new_state(
            self._rt, workflow_type, input, id, execution_timeout=execution_timeout
        )
        ops = signals.delivery_ops(self._rt, state.id, signal, payload, signal_id)
        try:
            lifecycle.start_workflow(self._rt, state, ops)
        except WorkflowAlreadyExistsError:
            self.signal(state.id, signal, payload, signal_id=signal_id)
            return WorkflowHandle(self, state.id)
        self._wake(state.id, "start")
        return WorkflowHandle(self, state.id)

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        return WorkflowHandle(self, check_id(workflow_id))

    def describe(self, workflow_id: str, *, attempts: bool = False) -> WorkflowDescription:
        """The run's stored state (one point read). With ``attempts`` also its failed
        activity attempts (``failed_attempts``), which costs a read of its whole partition."""
        return handle.describe(self._rt, check_id(workflow_id), attempts)

    def list(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
    ) -> list[WorkflowSummary]:
        """Workflows by status and type, oldest first (see ``list_page`` for paging)."""
        return listing.list_page(self._rt, status, workflow_type, limit, None)[0]

    def list_page(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[builtins.list[WorkflowSummary], str | None]:
        """One page of ``list`` and the cursor of the next page (None when done)."""
        return listing.list_page(self._rt, status, workflow_type, limit, cursor)

    # -- talking to runs ------------------------------------------------------------------------

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        """Deliver a signal (buffered until the workflow waits for it); a repeated id is a no-op."""
        self._check_open()
        if signals.deliver(self._rt, check_id(workflow_id), name, payload, signal_id):
            self._wake(workflow_id, "signal")

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
        self._check_open()
        result = interactions.send_update(
            self._rt, self._dispatcher, check_id(workflow_id), name, payload, update_id, timeout
        )
        self._drive_woken()  # what the update's drive woke: a child it let start, a parent
        return result

    def query(self, workflow_id: str, name: str, arg: Any = None) -> Any:
        """Answer a query from the workflow's current state, read-only, on any engine."""
        self._check_open()
        return interactions.run_query(self._rt, check_id(workflow_id), name, arg)

    def complete_activity(self, token: str, result: Any = None) -> None:
        """Complete an async activity with ``result`` (single use) and resume its workflow."""
        self._check_open()
        self._wake(interactions.complete_async(self._rt, token, result=result), "async-activity")

    def fail_activity(self, token: str, error: BaseException | str) -> None:
        """Fail an async activity attempt; the activity's retry policy decides what follows."""
        self._check_open()
        workflow_id = interactions.complete_async(self._rt, token, error=error, failed=True)
        self._wake(workflow_id, "async-activity")

    def cancel(self, workflow_id: str) -> None:
        """Cancel a run; its ``result()`` then raises ``WorkflowCancelledError``."""
        self._check_open()
        state, cancelled = control.cancel(self._rt, check_id(workflow_id))
        if cancelled and state.parent and state.parent.get("await", True):
            self._wake(state.parent["id"], "child-completion")
        self._settle()

    def suspend(self, workflow_id: str) -> None:
        """Pause a run until ``resume``; timers that fall due meanwhile are re-armed then."""
        self._check_open()
        control.suspend(self._rt, check_id(workflow_id))

    def purge(self, workflow_id: str) -> None:
        """Delete a finished run now (its idempotency key stays taken); see ``retention``."""
        self._check_open()
        retention_mod.purge_now(self._rt, check_id(workflow_id))

    def retry(self, workflow_id: str) -> None:
        """Re-run a failed workflow from its last good step (the failed step runs again)."""
        self._check_open()
        if control.retry_failed(self._rt, check_id(workflow_id)):
            self._wake(workflow_id, "resume")

    # -- recovery and maintenance ---------------------------------------------------------------

    def recover_all(self) -> int:
        """Drive every running workflow from its stored history; returns how many."""
        ids = list(listing.all_ids(self._rt, RUNNING))
        for workflow_id in ids:
            self._dispatcher.enqueue(workflow_id, "recover")
        if self._rt.background_tasks == "manual":
            self._dispatcher.drain(swallow_errors=True)
        return len(ids)

    def resume(self, workflow_id: str) -> str:
        """Resume a suspended run, or drive a running one now; returns its status after."""
        self._check_open()
        if self.describe(workflow_id).status == SUSPENDED:
            control.resume_suspended(self._rt, workflow_id)
        outcome = self._dispatcher.run(check_id(workflow_id), "resume", swallow_errors=False)
        self._settle()
        return outcome if outcome in STATUSES else self.describe(workflow_id).status

    @contextmanager
    def invocation(
        self,
        *,
        time_left: Callable[[], float] | None = None,
        deadline: float | None = None,
        step_reserve: float = 1.0,
        heartbeat: bool = True,
    ) -> Iterator[Engine]:
        """Scope one serverless invocation (a Lambda handler call): no step starts with less
        than ``step_reserve`` seconds left (``time_left()`` or the monotonic ``deadline``),
        held claims are renewed while it runs and those of parked runs released on exit."""
        with invocation_scope(
            self._rt,
            time_left=time_left,
            deadline=deadline,
            step_reserve=step_reserve,
            heartbeat=heartbeat,
        ):
            yield self

    def run_maintenance(
        self,
        now: float | None = None,
        *,
        budget_seconds: float | None = None,
        max_timers: int = MAX_TIMERS_PER_PASS,
    ) -> MaintenanceReport:
        """Fire every timer due at ``now`` once and drive what it wakes; report what was done.

        A pass reads at most ``max_timers`` due timers (``report.cut_short`` says it stopped
        there); the next pass reads on.
        """
        self._check_open()
        cap = check_positive_int(max_timers, "max_timers")
        deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
        report = run_maintenance(self._rt, self._dispatcher, now, Budget(deadline, max_timers=cap))
        self._settle()
        return report

    def close(self) -> None:
        """Stop background work; the storage stays open (it belongs to the caller)."""
        if self._background is not None:
            self._background.stop()
            self._background = None
        if not self._rt.closed:
            self._rt.fence.close()
        self._rt.parked.clear()
        self._rt.shutdown.close()

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

    def _wake(self, workflow_id: str, kind: str = "wake") -> None:
        """Drive what a committed call made drivable (inline in manual mode).

        The call's write has landed and armed the run's wake-up, so a failed drive is logged,
        not raised: a caller told the call failed would retry a start into its own run
        (``WorkflowAlreadyExistsError``). A later maintenance pass drives the run.
        """
        self._dispatcher.enqueue(workflow_id, kind)
        self._drive_woken()

    def _drive_woken(self) -> None:
        """Drive what is queued (inline in manual mode), then close children of ended runs."""
        if self._rt.background_tasks == "manual":
            self._dispatcher.drain(swallow_errors=True)
        self._settle()

    def _settle(self) -> None:
        """Close the children of runs that ended here (parent close policies)."""
        for parent in self._rt.closed_runs.drain():
            try:
                control.close_children(self._rt, parent)
            except WeftError as exc:
                logger.warning(
                    "children of %s not closed yet (maintenance retries): %s", parent, exc
                )

    def _check_open(self) -> None:
        if self._rt.closed:
            raise ConfigurationError("this engine is closed; create a new one")
