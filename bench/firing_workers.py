"""Timers fired per second against maintenance workers and parallel fires per worker.

W workers (1, 2, 4, 8), each a thread with its own ``Engine`` (as each Lambda container has
its own), run passes on their share of the timer shards (``run_maintenance(worker=i,
workers=W, parallel_fires=P)``, each pass in its own ``engine.invocation()``) until every
timer is fired, on ONE store: ``MemoryStorage`` wrapped in ``LatencyStorage``, which sleeps
a fixed time per request (``--latency-ms`` for a read or a single-item write,
``--transact-ms`` for a transaction), outside any lock, as a network round trip would. Moto
serialises requests, so it cannot show what concurrent workers do alone.

N runs (``--runs``) are parked on a sleep that is already due. Each fire drives what the
model's default run does after its sleep: three steps of 700 B, then a park on a signal.
Before and after, the bench checks that every run's first step after the sleep ran exactly
once and that no timer is left. Prints, per (W, P): wall seconds, timers fired per second,
the rate per worker, and the process CPU time per fire (the bound a Lambda with a fraction
of a vCPU meets first). ``measure_per_worker`` gives ``capacity.py`` the one-worker rate at
the handler's default ``P``.

Run: ``python bench/firing_workers.py`` (about a minute); ``--workers``, ``--parallel``,
``--runs``, ``--latency-ms``, ``--transact-ms``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from weft_serverless import Engine, workflow
from weft_serverless.aws.maintenance import DEFAULT_PARALLEL_FIRES
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Key, Op, SortRange, Storage
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import DelegatingStorage, VirtualClock

LATENCY_MS = 4.0
"""A DynamoDB read or single-item write in the same Region: single-digit milliseconds."""
TRANSACT_MS = 8.0
"""A ``TransactWriteItems``: two phases, about twice a single write."""
TIMER_SHARDS = 16
"""The store's timer shards: at least the most workers measured, so none idles."""
SLEEP = 60.0


class LatencyStorage(DelegatingStorage):
    """Sleeps a round trip per request (a scan: once, for its first page), then delegates."""

    def __init__(self, inner: Storage, latency: float, transact: float) -> None:
        super().__init__(inner)
        self.latency = latency
        self.transact = transact
        self._lock = threading.Lock()
        self.requests = 0

    def _wait(self, seconds: float) -> None:
        with self._lock:
            self.requests += 1
        time.sleep(seconds)

    def _get(self, key: Key) -> bytes | None:
        self._wait(self.latency)
        return super()._get(key)

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        self._wait(self.latency)
        return super()._scan(partition, rng, limit, reverse)

    def _batch(self, ops: Sequence[Op]) -> None:
        self._wait(self.latency if len(ops) == 1 else self.transact)
        super()._batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        single = len({c.key for c in conditions} | {op.key for op in ops}) <= 1
        self._wait(self.latency if single else self.transact)
        return super()._conditional_batch(conditions, ops)


def _workflows(effects: Counter[str]) -> dict[str, Any]:
    lock = threading.Lock()

    def first(workflow_id: str) -> str:
        with lock:
            effects[workflow_id] += 1
        return "x" * 700

    def napper(ctx: Any, workflow_id: str) -> Any:
        yield ctx.sleep(SLEEP)
        yield ctx.run("first", workflow_id)
        yield ctx.run("step", workflow_id)
        yield ctx.run("step", workflow_id)
        return (yield ctx.wait_for_signal("go"))

    return {
        "napper": workflow("napper")
        .activities(first=first, step=lambda _: "x" * 700)
        .execute(napper)
    }


@dataclass(frozen=True)
class Result:
    workers: int
    parallel: int
    runs: int
    seconds: float
    cpu_seconds: float
    requests: int

    @property
    def per_second(self) -> float:
        return self.runs / self.seconds

    @property
    def per_worker(self) -> float:
        return self.per_second / self.workers

    @property
    def cpu_ms_per_fire(self) -> float:
        return self.cpu_seconds / self.runs * 1000


def _engine(storage: Storage, workflows: dict[str, Any], clock: VirtualClock, name: str) -> Engine:
    return Engine.create(
        storage,
        workflows,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        engine_id=name,
        recover=False,
        shards={"timers": TIMER_SHARDS, "claims": TIMER_SHARDS},
    )


def _timers_left(store: Storage) -> int:
    return sum(1 for s in range(TIMER_SHARDS) for _ in store.scan(keys.timer_partition(s)))


def measure(workers: int, parallel: int, runs: int, latency: float, transact: float) -> Result:
    """Park ``runs`` runs on a due sleep, fire them with ``workers`` x ``parallel``, check."""
    clock = VirtualClock()
    effects: Counter[str] = Counter()
    workflows = _workflows(effects)
    store = MemoryStorage()
    setup = _engine(store, workflows, clock, "setup")
    ids = [f"run-{n:06d}" for n in range(runs)]
    for workflow_id in ids:
        with setup.invocation(time_left=lambda: 900.0):
            setup.start("napper", workflow_id, id=workflow_id)
    clock.advance(SLEEP + 1)
    slow = LatencyStorage(store, latency, transact)
    engines = [_engine(slow, workflows, clock, f"worker-{i}") for i in range(workers)]
    slow.requests = 0
    barrier = threading.Barrier(workers + 1)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        engine = engines[index]
        barrier.wait()
        try:
            while True:
                with engine.invocation(time_left=lambda: 900.0):
                    report = engine.run_maintenance(
                        worker=index, workers=workers, parallel_fires=parallel
                    )
                if not report.timers_fired and not report.parts.get("timers_retained"):
                    return
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    if errors:
        raise errors[0]
    if effects != Counter(ids):
        twice = [wf for wf, n in effects.items() if n != 1]
        missing = len(set(ids) - set(effects))
        raise SystemExit(f"not fired exactly once: {twice[:5]} twice or more, {missing} never")
    if _timers_left(store):
        raise SystemExit(f"{_timers_left(store)} timers left")
    return Result(workers, parallel, runs, seconds, cpu_seconds, slow.requests)


def measure_per_worker(runs: int = 200) -> Result:
    """One worker at the handler's default parallel fires: ``capacity.py``'s per-worker rate."""
    return measure(1, DEFAULT_PARALLEL_FIRES, runs, LATENCY_MS / 1000, TRANSACT_MS / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--parallel", default=f"1,4,{DEFAULT_PARALLEL_FIRES}")
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=LATENCY_MS)
    parser.add_argument("--transact-ms", type=float, default=TRANSACT_MS)
    args = parser.parse_args()
    latency, transact = args.latency_ms / 1000, args.transact_ms / 1000
    print(
        f"{args.runs} due timers on one MemoryStorage, {args.latency_ms:g} ms a request, "
        f"{args.transact_ms:g} ms a transaction; each fire: 3 steps of 700 B, then a park"
    )
    print(
        f"{'workers':>7} {'parallel':>8} {'seconds':>8} {'fired/s':>9} {'per worker':>10} "
        f"{'req/fire':>8} {'CPU ms/fire':>11}"
    )
    for workers in (int(w) for w in args.workers.split(",")):
        for parallel in (int(p) for p in args.parallel.split(",")):
            result = measure(workers, parallel, args.runs, latency, transact)
            print(
                f"{workers:>7} {parallel:>8} {result.seconds:>8.2f} {result.per_second:>9.1f} "
                f"{result.per_worker:>10.1f} {result.requests / args.runs:>8.1f} "
                f"{result.cpu_ms_per_fire:>11.2f}"
            )
    print("every timer fired once, none left (checked for each row)")


if __name__ == "__main__":
    main()
