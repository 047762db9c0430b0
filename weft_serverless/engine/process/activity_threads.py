"""Where activity attempts run when they run together: a bounded set of threads for plain
functions, one event loop for ``async def`` ones.

The bound counts attempts the engine still waits for. An attempt the engine gives up (a
timeout passed, the run was cancelled, its branch lost a race) frees its place at once: Python
cannot stop a thread, so the abandoned one finishes on its own and its thread then ends,
instead of holding a place that a live attempt needs. Threads are kept for reuse, so a
fan-out does not pay a thread start per branch. Nothing here starts before the first attempt
that needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by the first attempt that needs them, not at import
    import asyncio
    import queue
    from concurrent.futures import Future

DEFAULT_MAX_PARALLEL = 32
"""Attempts of plain (non-async) activities one engine runs at once, by default."""
MAX_PARALLEL_LIMIT = 1024


class Job:
    """One attempt handed to a thread: its future, and its place in the bound."""

    def __init__(self, call: Callable[[], Any]) -> None:
        from concurrent.futures import Future

        self.call = call
        self.future: Future[Any] = Future()
        self._placed = True
        self._lock = threading.Lock()

    def give_up_place(self) -> bool:
        """Whether this call freed the job's place (only the first call does)."""
        with self._lock:
            placed, self._placed = self._placed, False
            return placed

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            value = self.call()
        except BaseException as exc:  # handed to whoever waits on the future
            self.future.set_exception(exc)
        else:
            self.future.set_result(value)


class ActivityThreads:
    """The engine's threads for activity attempts (``max_parallel_activities``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._places = threading.Semaphore(limit)
        self._idle: list[queue.SimpleQueue[Job | None]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def submit(
        self, call: Callable[[], Any], *, wait: bool, placed: Callable[[], None] | None = None
    ) -> Job | None:
        """Run ``call`` on a thread; None when every place is taken and ``wait`` is False.

        ``placed`` runs once the place is taken and before any thread can start ``call``.
        """
        if not self._places.acquire(blocking=wait):
            return None
        if placed is not None:
            placed()
        job = Job(call)
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            import queue

            inbox = queue.SimpleQueue()
            worker = threading.Thread(
                target=self._work, args=(inbox,), name="weft-activity", daemon=True
            )
            worker.start()
        inbox.put_nowait(job)
        return job

    def abandon(self, job: Job) -> None:
        """The engine no longer waits for ``job``: its place is free for another attempt."""
        if job.give_up_place():
            self._places.release()

    def _work(self, inbox: queue.SimpleQueue[Job | None]) -> None:
        while True:
            job = inbox.get()
            if job is None:
                return
            job.run()
            if not job.give_up_place():
                return  # abandoned: its place went to another attempt, and so does this thread
            self._places.release()
            with self._lock:
                if self._closed or len(self._idle) >= self.limit:
                    return
                self._idle.append(inbox)

    def run_coroutine(self, coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
        """Schedule an ``async def`` attempt on the engine's event loop (started on first use)."""
        import asyncio  # only engines that run async activities pay for it

        return asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        import asyncio

        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="weft-activity-loop", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Let idle threads and the event loop end (attempts still running finish first)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            loop, self._loop = self._loop, None
        for inbox in idle:
            inbox.put_nowait(None)
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
