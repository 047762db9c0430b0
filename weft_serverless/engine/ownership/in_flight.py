"""Requests sent side by side: a step's write-out travels beside the head put (ADR 0057).

On a store where every request is a network round trip (DynamoDB), the write-out of the
step before and the head put of the new step are independent requests; sent one after the
other they cost a step two round trips. ``Overlap`` sends a request on a thread of its own
(a small pool, started on first use, so nothing runs at import or on a store that never
asks) and hands back a handle the caller waits on before it relies on the write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

WORKERS = 4
"""Write-outs in flight at once: one per run being driven is plenty (a run has at most one
write-out in flight), and a few cover the runs one engine drives together."""


class Overlap:
    """A few threads that carry requests the caller does not wait on yet."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def send(self, job: Callable[[], None]) -> Future[None]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="weft-write")
            return self._pool.submit(job)

    def close(self) -> None:
        """Wait for the requests in flight, then stop the threads."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
