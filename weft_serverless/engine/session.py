"""What one ``Engine`` object keeps between calls: its drive queue and how it drains it.

A call that makes a run drivable (a start, a signal, a completion) commits first, then wakes
the run here: in manual mode the queue is drained inline, in automatic mode the background
driver drains it. Runs that ended during a drive leave their children to close, which
``settle`` does after every call. Recovery, an explicit resume and a maintenance pass drive
through the same queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from weft_serverless.engine import teardown, timer_hints
from weft_serverless.engine.background import BackgroundDriver
from weft_serverless.engine.config import check_id, check_positive_int, check_share
from weft_serverless.engine.drive.dispatch import Dispatcher
from weft_serverless.engine.maintenance import MaintenanceReport, run_maintenance
from weft_serverless.engine.persistence.records import RUNNING, STATUSES, SUSPENDED
from weft_serverless.engine.process.timer_hints import TimerHint, send
from weft_serverless.engine.runs import admission, control
from weft_serverless.engine.runtime import Budget, Runtime, logger
from weft_serverless.engine.visibility import listing
from weft_serverless.errors import ConfigurationError, WeftError
from weft_serverless.storage.keys.shards import Share

_ADMISSION_ROUNDS = 100  # bounds a chain of admitted runs that end at once, each freeing a slot


class Session:
    """The drive queue of one engine object, its background driver, and their shutdown."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.dispatcher = Dispatcher(rt)
        self.background: BackgroundDriver | None = None
        # Where the last pass's re-hint stopped, per share: a warm container may be handed
        # another worker's share by the next tick, whose window it has not hinted.
        self._hinted_until: dict[Share, float] = {}
        if rt.background_tasks == "automatic":
            self.background = BackgroundDriver(rt, self.dispatcher)

    def start_background(self) -> None:
        if self.background is not None:
            self.background.start()

    def check_open(self) -> None:
        if self.rt.closed:
            raise ConfigurationError("this engine is closed; create a new one")

    def opened(self, workflow_id: str | None = None) -> str:
        """Refuse a closed engine; check ``workflow_id`` when given (returned as is)."""
        self.check_open()
        return "" if workflow_id is None else check_id(workflow_id)

    def wake(self, workflow_id: str, kind: str = "wake") -> None:
        """Drive what a committed call made drivable (inline in manual mode).

        The call's write has landed and armed the run's wake-up, so a failed drive is logged,
        not raised: a caller told the call failed would retry a start into its own run
        (``WorkflowAlreadyExistsError``). A later maintenance pass drives the run.
        """
        self.dispatcher.enqueue(workflow_id, kind)
        self.drive_woken()

    def drive_woken(self) -> None:
        """Drive what is queued (inline in manual mode), then close children of ended runs."""
        if self.rt.background_tasks == "manual":
            self.dispatcher.drain(swallow_errors=True)
        self.settle()

    def settle(self) -> None:
        """Close the children of runs that ended here (parent close policies), run the
        finalizers of runs that ended with a teardown, and admit the runs queued behind
        concurrency slots that ended runs freed here (then drive them)."""
        for _ in range(_ADMISSION_ROUNDS):  # an admitted run may end at once and free a slot
            self._close_children()
            self._run_teardowns()
            admitted = [run for gate in self.rt.freed_gates.drain() for run in self._admit(gate)]
            if not admitted:
                return
            for run_id in admitted:
                self.dispatcher.enqueue(run_id, "start")
            if self.rt.background_tasks == "manual":
                self.dispatcher.drain(swallow_errors=True)

    def _close_children(self) -> None:
        for parent in self.rt.closed_runs.drain():
            try:
                control.close_children(self.rt, parent)
            except WeftError as exc:
                logger.warning(
                    "children of %s not closed yet (maintenance retries): %s", parent, exc
                )

    def _run_teardowns(self) -> None:
        """Run the finalizers of runs that ended here with a teardown; what is left (a
        backoff, an error, a claim held elsewhere) is the teardown timer's."""
        for workflow_id in self.rt.teardowns.drain():
            try:
                teardown.run(self.rt, workflow_id)
            except WeftError as exc:
                logger.warning(
                    "teardown of %s not run yet (maintenance retries): %s", workflow_id, exc
                )

    def _admit(self, gate: str) -> list[str]:
        """The queued runs admitted as running into ``gate``'s freed slots; on an error the
        gate's admit timer (armed in the terminal batch) has a later pass admit them."""
        try:
            return [run for run, status in admission.admit_runs(self.rt, gate) if status == RUNNING]
        except WeftError as exc:
            logger.warning(
                "queued runs of %s not admitted yet (maintenance retries): %s", gate, exc
            )
            return []

    def recover_all(self) -> int:
        """Queue every running workflow (driven inline in manual mode); returns how many."""
        ids = list(listing.all_ids(self.rt, RUNNING))
        for workflow_id in ids:
            self.dispatcher.enqueue(workflow_id, "recover")
        if self.rt.background_tasks == "manual":
            self.dispatcher.drain(swallow_errors=True)
        return len(ids)

    def resume(self, workflow_id: str, status: str) -> str:
        """Resume a suspended run, or drive a running one now; its status after."""
        if status == SUSPENDED:
            control.resume_suspended(self.rt, workflow_id)
        outcome = self.dispatcher.run(workflow_id, "resume", swallow_errors=False)
        self.settle()
        return outcome if outcome in STATUSES else ""

    def maintain(
        self,
        now: float | None,
        budget_seconds: float | None,
        max_timers: int,
        share: tuple[int, int] = (0, 1),
        parallel_fires: int = 1,
    ) -> MaintenanceReport:
        self.check_open()
        cap = check_positive_int(max_timers, "max_timers")
        worker, workers = check_share(*share)
        parallel = check_positive_int(parallel_fires, "parallel_fires")
        deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
        budget = Budget(deadline, max_timers=cap)
        shards = Share(worker, workers)
        report = run_maintenance(self.rt, self.dispatcher, now, budget, shards, parallel)
        if self.rt.hints.port is not None and not budget.exhausted():
            hinted, self._hinted_until[shards] = timer_hints.rehint(
                self.rt, report.now, self._hinted_until.get(shards), shards
            )
            report.parts["timers_hinted"] = hinted
        self.settle()
        return report

    def fire_hints(
        self, hints: Sequence[TimerHint], wait: Callable[[float], None]
    ) -> timer_hints.TimerHintReport:
        """Fire what ``hints`` name; those not due yet go back to this engine's hint port."""
        self.check_open()
        report = timer_hints.fire_hints(self.rt, self.dispatcher, hints, wait)
        self.settle()
        port = self.rt.hints.port
        if port is not None and report.resend:
            send(port, [hint for hint, _ in report.resend], self.rt.metrics)
        return report

    def wait_for_change(self, remaining: float | None) -> None:
        """Block a result waiter until a run ends here, or a short pause passes."""
        pause = 0.2 if remaining is None else max(0.0, min(remaining, 0.2))
        with self.rt.terminal_changed:
            self.rt.terminal_changed.wait(pause)

    def close(self) -> None:
        if self.background is not None:
            self.background.stop()
            self.background = None
        if not self.rt.closed:
            self.rt.fence.close()
        self.rt.parked.clear()
        self.rt.shutdown.close()
        self.rt.activity_threads.close()
