"""The simulated world's activity threads: branches run together, on the world's one thread.

An engine hands attempts that run beside others (branches of ``all``, ``map`` and ``race``,
attempts with a time limit, attempts inside an invocation) to its activity threads and
watches their futures. ``SimThreads`` takes their place in each simulated engine: a job
submitted is only queued, and each time the watching drive asks whether an attempt is done
and none has finished since it last looked, one queued job, picked by the world's seeded
generator, runs to its end. Attempts therefore finish one per look, in a seeded order, and
each branch is committed before the next one finishes: faults land between branch commits,
and a replay must give the same values whatever the order was.

An activity may hang (``Hung``): its thread is stuck, its future never finishes, and only a
time limit (``heartbeat_timeout``) makes the drive give it up. A drive that keeps watching a
hung attempt past that limit is reported (``overdue``) and its process dies, so a defect
there cannot hang the world.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

from weft_serverless.engine.process.activity_threads import ActivityThreads, Job
from weft_serverless.testing import SimulatedCrash

HUNG_LOOKS = 4
"""Looks at a hung attempt, with nothing else to run, after which its drive has waited past
any time limit the workload sets (each look follows a real 50 ms poll of the engine)."""


class Hung(BaseException):
    """Raised by an activity whose thread hangs from then on (a ``BaseException``, so no
    ``except Exception`` in user code or the engine can swallow it)."""


class SimFuture(Future[Any]):
    """A job's future: asking whether it is done lets the pool finish one queued job."""

    def __init__(self, pool: SimThreads) -> None:
        super().__init__()
        self._pool = pool
        self.job: SimJob | None = None

    def done(self) -> bool:
        if not super().done() and self.job is not None:
            self._pool.look(self.job)
        return super().done()

    def result(self, timeout: float | None = None) -> Any:
        if self.job is not None:
            self._pool.read(self.job)
        return super().result(timeout)


class SimJob(Job):
    """One attempt queued on the pool; ``hung`` once its activity hung."""

    def __init__(self, call: Callable[[], Any], pool: SimThreads) -> None:
        super().__init__(call)
        future = SimFuture(pool)
        future.job = self
        self.future = future
        self.hung = False
        self.looks = 0

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            value = self.call()
        except Hung:
            self.hung = True  # the thread is stuck: the future never finishes
        except BaseException as exc:  # a crash too: the drive re-raises it when it reads
            self.future.set_exception(exc)
        else:
            self.future.set_result(value)


class SimThreads(ActivityThreads):
    """Activity threads for one simulated engine (see the module docstring).

    ``choose(n)`` picks which of ``n`` queued jobs finishes next (the world's generator);
    ``overdue(why)`` reports a drive that watched a hung attempt past every time limit.
    """

    def __init__(
        self, limit: int, choose: Callable[[int], int], overdue: Callable[[str], None]
    ) -> None:
        super().__init__(max(1, limit))
        self.choose = choose
        self.overdue = overdue
        self.queued: list[SimJob] = []
        self.unread: list[SimJob] = []  # finished, not read by their drive yet
        self.hung: list[SimJob] = []
        self.running = False  # a job is running now (an activity may hang only then)

    def submit(
        self, call: Callable[[], Any], *, wait: bool, placed: Callable[[], None] | None = None
    ) -> Job | None:
        if len(self.queued) + len(self.hung) >= self.limit and not wait:
            return None
        if placed is not None:
            placed()  # as the real pool: once the place is taken, before the call can run
        job = SimJob(call, self)
        self.queued.append(job)
        return job

    def abandon(self, job: Job) -> None:
        for pending in (self.queued, self.unread, self.hung):
            if job in pending:
                pending.remove(job)
        job.give_up_place()

    def read(self, job: SimJob) -> None:
        if job in self.unread:
            self.unread.remove(job)

    def look(self, asked: SimJob) -> None:
        """The drive looks at ``asked``, unfinished: one queued job finishes, unless one it
        has not read yet finished already (one completion per look of the drive)."""
        if self.unread:
            return
        if not self.queued:
            if asked.hung:
                asked.looks += 1
                if asked.looks > HUNG_LOOKS:
                    self.overdue("a drive kept waiting for a hung attempt past its time limit")
                    raise SimulatedCrash("the process was killed with its drive stuck")
            return
        job = self.queued.pop(self.choose(len(self.queued)))
        self.running = True
        try:
            job.run()
        finally:
            self.running = False
        if job.hung:
            self.hung.append(job)
        elif job.future.done():
            self.unread.append(job)

    def run_coroutine(self, coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
        coroutine.close()
        raise NotImplementedError("the simulated world has no async def activities")

    def close(self) -> None:
        self.queued.clear()
        self.unread.clear()
        self.hung.clear()


__all__ = ["HUNG_LOOKS", "Hung", "SimThreads"]
