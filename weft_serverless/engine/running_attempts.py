"""The activity attempts this engine is running, by run: how a cancel reaches them at once.

A cancel, an execution timeout or any terminal move made by this engine sets the cancel event
of every attempt of that run running here (``transitions.ended``). An attempt on another
engine learns it at its next heartbeat (see ``steps/heartbeats``).
"""

from __future__ import annotations

import threading

from weft_serverless.activity import ActivityContext


class RunningAttempts:
    def __init__(self) -> None:
        self._by_run: dict[str, set[ActivityContext]] = {}
        self._lock = threading.Lock()

    def add(self, context: ActivityContext) -> None:
        with self._lock:
            self._by_run.setdefault(context.workflow_id, set()).add(context)

    def discard(self, context: ActivityContext) -> None:
        with self._lock:
            running = self._by_run.get(context.workflow_id)
            if running is not None:
                running.discard(context)
                if not running:
                    del self._by_run[context.workflow_id]

    def cancel(self, workflow_id: str) -> int:
        """Tell every attempt of ``workflow_id`` running here to stop; returns how many."""
        with self._lock:
            running = list(self._by_run.get(workflow_id, ()))
        for context in running:
            context.cancel_event.set()
        return len(running)
