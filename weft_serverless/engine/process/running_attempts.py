"""The activity attempts this engine is running, by run: how a cancel reaches them at once.

A cancel, an execution timeout or any terminal move made by this engine sets the cancel event
of every attempt of that run running here (``transitions.ended``). An attempt on another
engine learns it at its next heartbeat (see ``steps/heartbeats``).
"""

from __future__ import annotations

import threading

from weft_serverless.activity import ActivityContext


class RunningAttempts:
    """One flat table of running attempts, context to run id.

    Every attempt is added and discarded (every step of ``ctx.run`` makes one); a cancel is
    rare. So add and discard are one dict write each, and ``cancel`` looks through the
    table, which holds only the attempts in flight here (at most the activity threads' and
    the drives' count).
    """

    def __init__(self) -> None:
        self._running: dict[ActivityContext, str] = {}
        self._lock = threading.Lock()

    def add(self, context: ActivityContext) -> None:
        with self._lock:
            self._running[context] = context.workflow_id

    def discard(self, context: ActivityContext) -> None:
        with self._lock:
            self._running.pop(context, None)

    def cancel(self, workflow_id: str) -> int:
        """Tell every attempt of ``workflow_id`` running here to stop; returns how many."""
        with self._lock:
            running = [context for context, run in self._running.items() if run == workflow_id]
        for context in running:
            context.cancel_event.set()
        return len(running)
