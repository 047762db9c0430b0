"""The queue of workflows to drive, and the rule that one engine drives a workflow at a time.

Waking calls (start, signal, a fired timer, a finished child) enqueue; whoever drains runs
the drives. A workflow asked for while it is being driven is driven once more afterwards, so
no wake-up is lost between a drive's last read and its return.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from weft_serverless.errors import WeftError

from .commit import LostCommit
from .runtime import Runtime, logger

_LOST_COMMIT_RETRIES = 3


class Dispatcher:
    def __init__(self, rt: Runtime, drive: Callable[[str], object]) -> None:
        self._rt = rt
        self._drive = drive
        self._lock = threading.Lock()
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._again: set[str] = set()
        self.on_enqueue: Callable[[], None] | None = None

    def enqueue(self, workflow_id: str) -> None:
        with self._lock:
            if workflow_id in self._active:
                self._again.add(workflow_id)
            elif workflow_id not in self._queued:
                self._queued.add(workflow_id)
                self._queue.append(workflow_id)
        if self.on_enqueue is not None:
            self.on_enqueue()

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def drain(self, *, swallow_errors: bool = False) -> int:
        """Drive queued workflows until the queue is empty; returns how many drives ran."""
        drives = 0
        while True:
            with self._lock:
                if not self._queue:
                    return drives
                workflow_id = self._queue.popleft()
                self._queued.discard(workflow_id)
                if workflow_id in self._active:
                    self._again.add(workflow_id)
                    continue
                self._active.add(workflow_id)
            try:
                drives += 1
                self._drive_with_retries(workflow_id, swallow_errors)
            finally:
                with self._lock:
                    self._active.discard(workflow_id)
                    if workflow_id in self._again:
                        self._again.discard(workflow_id)
                        self._queued.add(workflow_id)
                        self._queue.append(workflow_id)

    def _drive_with_retries(self, workflow_id: str, swallow_errors: bool) -> None:
        for _ in range(_LOST_COMMIT_RETRIES):
            try:
                self._drive(workflow_id)
                return
            except LostCommit:
                logger.info("workflow %s: another writer committed first; re-reading", workflow_id)
            except WeftError as exc:
                if not swallow_errors:
                    raise
                logger.warning("workflow %s could not be driven: %s", workflow_id, exc)
                return
