"""The automatic-mode driver: one daemon thread that drains the queue and fires timers.

Long-lived processes get timers and wake-ups without a host loop; the serverless profile
(``background_tasks="manual"``) never starts it.
"""

from __future__ import annotations

import threading

from weft_serverless.engine.drive.dispatch import Dispatcher
from weft_serverless.engine.maintenance import run_maintenance
from weft_serverless.engine.runtime import Budget, Runtime, logger

POLL_INTERVAL = 1.0


class BackgroundDriver:
    def __init__(self, rt: Runtime, dispatcher: Dispatcher) -> None:
        self._rt = rt
        self._dispatcher = dispatcher
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="weft-background", daemon=True)
        dispatcher.on_enqueue = self._wake.set

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            pause = POLL_INTERVAL
            try:
                self._dispatcher.drain(swallow_errors=True)
                report = run_maintenance(self._rt, self._dispatcher, None, Budget())
                if report.next_due is not None:
                    pause = min(pause, max(0.0, report.next_due - self._rt.clock()))
            except Exception:
                logger.exception("background driver pass failed; retrying")
            if self._dispatcher.pending():
                continue
            self._wake.wait(pause)


class Heartbeat:
    """Renews held claims on a thread while an invocation drives a long activity."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._stop = threading.Event()
        interval = rt.fence.renew_interval or POLL_INTERVAL
        self._interval = interval
        self._thread = threading.Thread(target=self._loop, name="weft-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._rt.fence.renew_all()
                self._rt.metrics.incr("heartbeat_renewals")
            except Exception:
                logger.exception("claim heartbeat failed; the next one retries")
