"""The queue of workflows to drive, and the rule that one engine drives a workflow at a time.

Waking calls (start, signal, a fired timer, a finished child) enqueue; whoever drains runs
the drives. A workflow asked for while it is being driven is driven once more afterwards, so
no wake-up is lost between a drive's last read and its return.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from weft_serverless.engine.drive.guarded import KeptLosing, guarded_drive, retry_lost_commits
from weft_serverless.engine.drive.run_loop import BUSY, DEPOSED, DriveRequest
from weft_serverless.engine.ownership import EngineDeposedError
from weft_serverless.engine.process.telemetry import skip_unsupported
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.errors import UnsupportedSchemaVersionError, WeftError, WorkflowBusyError


class Dispatcher:
    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._queue: deque[tuple[str, str]] = deque()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._again: dict[str, str] = {}
        self.on_enqueue: Callable[[], None] | None = None

    def enqueue(self, workflow_id: str, kind: str = "wake") -> None:
        with self._lock:
            if workflow_id in self._active:
                self._again[workflow_id] = kind
            elif workflow_id not in self._queued:
                self._queued.add(workflow_id)
                self._queue.append((workflow_id, kind))
        if self.on_enqueue is not None:
            self.on_enqueue()

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def run(self, workflow_id: str, kind: str, *, swallow_errors: bool = True) -> str:
        """Drive one workflow now, then whatever it woke; returns what its drive reported."""
        with self._lock:
            if workflow_id in self._active:
                self._again[workflow_id] = kind
                return BUSY
            self._active.add(workflow_id)
        try:
            outcome = self._drive_with_retries(workflow_id, kind, swallow_errors)
        finally:
            self._release(workflow_id)
        self.drain(swallow_errors=swallow_errors)
        return outcome

    def drain(self, *, swallow_errors: bool = False) -> int:
        """Drive queued workflows until the queue is empty; returns how many drives ran."""
        drives = 0
        while True:
            with self._lock:
                if not self._queue:
                    return drives
                workflow_id, kind = self._queue.popleft()
                self._queued.discard(workflow_id)
                if workflow_id in self._active:
                    self._again[workflow_id] = kind
                    continue
                self._active.add(workflow_id)
            try:
                drives += 1
                self._drive_with_retries(workflow_id, kind, swallow_errors)
            finally:
                self._release(workflow_id)

    @contextmanager
    def exclusive(self, workflow_id: str, timeout: float | None) -> Iterator[None]:
        """Hold the workflow against other drives on this engine (waiting up to ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while workflow_id in self._active:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WorkflowBusyError(
                        f"workflow {workflow_id!r} is being driven here; retry shortly"
                    )
                self._released.wait(remaining)
            self._active.add(workflow_id)
        try:
            yield
        finally:
            self._release(workflow_id)

    def _release(self, workflow_id: str) -> None:
        with self._lock:
            self._active.discard(workflow_id)
            self._released.notify_all()
            kind = self._again.pop(workflow_id, None)
            if kind is not None and workflow_id not in self._queued:
                self._queued.add(workflow_id)
                self._queue.append((workflow_id, kind))

    def _drive_with_retries(self, workflow_id: str, kind: str, swallow_errors: bool) -> str:
        """One drive, its lost commits retried. The timer hints its commits make are sent
        together when it ends (ADR 0054): inside an engine call they wait for the call's end
        as before, and a drive no call holds (automatic mode's background driver) batches
        them too, instead of one send per commit."""
        with self._rt.hints.scope():
            return self._drive_guarded(workflow_id, kind, swallow_errors)

    def _drive_guarded(self, workflow_id: str, kind: str, swallow_errors: bool) -> str:
        def attempt(why: str) -> str:
            request = DriveRequest()
            explicit = why == "resume"
            return guarded_drive(
                self._rt, workflow_id, why, request, self.enqueue, explicit=explicit
            )

        try:
            return retry_lost_commits(workflow_id, kind, attempt)
        except KeptLosing:
            return BUSY
        except EngineDeposedError:
            self._rt.fence.deposed(workflow_id)
            return DEPOSED
        except UnsupportedSchemaVersionError as exc:
            if not swallow_errors:
                raise
            skip_unsupported(self._rt.metrics, exc)
            return "error"
        except WeftError as exc:
            if not swallow_errors:
                raise
            logger.warning(
                "workflow %s could not be driven now (a later pass drives it): %s",
                workflow_id,
                exc,
            )
            return "error"
