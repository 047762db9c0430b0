"""Timer lateness with timer hints (ADR 0054), in virtual time, on the real engine.

A model run: runs that park on a sleep are started at a steady rate on ``MemoryStorage``;
every storage request advances the clock of the engine making it by an assumed DynamoDB
latency, and each hint the real ``HintOutbox`` sends becomes an SQS message delivered after
its ``DelaySeconds`` (what ``SqsTimerHints`` computes) plus an assumed send and delivery
latency. Deliveries go to a pool of timer workers (Lambda concurrency), each a real engine
calling ``fire_timer_hints``; a worker's time moves with its own storage requests. Lateness
is the worker's clock when the run's timer has fired minus the timer's due time. No
maintenance pass runs: hints alone fire every timer here (the sweep is the fallback).

Assumed figures (ADR 0054 gives their source): DynamoDB 6 ms a request; SQS SendMessageBatch
15 ms; SQS delivery to a Lambda worker 20 to 250 ms after the delay ends (uniform, seeded).
Write units per fire are billed from the writes the firing makes, by DynamoDB's rules (1 KB
units, a transaction bills each item twice; a delete bills one unit); the burst's drain time
is 100,000 times that over the table's default 40,000 WRU/s.

A hint delivered before its timer is due (``DelaySeconds`` is rounded down) waits on the
worker's clock until due, so lateness is what the firing itself takes once due.

Run: ``python bench/timer_lateness.py`` (about a minute; ``--seconds`` per steady rate).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from weft_serverless import Engine, MemoryStorage, TimerHint, workflow
from weft_serverless.storage.base import Condition, Op, Put
from weft_serverless.testing import DelegatingStorage

DB_SECONDS = 0.006
SEND_SECONDS = 0.015
DELIVERY = (0.020, 0.250)
WRITE_QUOTA = 40_000  # WRU/s, an on-demand table's default account-level table quota
BURST = 100_000
SQS_PRICE = 0.40 / 1e6  # standard queue, per request (64 KB chunk) beyond the free tier
IDLE_POLLS_A_MONTH = 5 * 3 * 60 * 24 * 30  # ESM: about 5 pollers, 20 s long polls (ADR 0054)


class Clock:
    """The clock of whichever engine is acting now (the model runs one call at a time)."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class LatentStorage(DelegatingStorage):
    """Every request advances the acting clock by ``DB_SECONDS``; writes are billed."""

    def __init__(self, inner: MemoryStorage, clock: Clock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.wru = 0

    def get(self, key: Any) -> bytes | None:
        self.clock.now += DB_SECONDS
        return self.inner.get(key)

    def scan(self, partition: str, prefix: str = "", **bounds: Any) -> Any:
        self.clock.now += DB_SECONDS
        return self.inner.scan(partition, prefix, **bounds)

    def _bill(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> None:
        self.clock.now += DB_SECONDS
        written = {op.key for op in ops}
        units = [
            math.ceil((len(op.key.sort) + len(op.value) + 40) / 1024) if isinstance(op, Put) else 1
            for op in ops
        ] + [1 for c in conditions if c.key not in written]
        self.wru += sum(units) * (2 if len(units) > 1 else 1)

    def batch(self, ops: Sequence[Op]) -> None:
        self._bill([], ops)
        self.inner.batch(ops)

    def conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self._bill(conditions, ops)
        return self.inner.conditional_batch(conditions, ops)


class ModelQueue:
    """The SQS port: each hint becomes visible ``DelaySeconds`` after it was sent."""

    horizon = 900.0

    def __init__(self, clock: Clock, rng: random.Random) -> None:
        self.clock = clock
        self.rng = rng
        self.deliveries: list[tuple[float, int, TimerHint]] = []
        self.sends = 0
        self._order = itertools.count()

    def send(self, hints: Sequence[TimerHint]) -> None:
        self.clock.now += SEND_SECONDS
        self.sends += 1
        for hint in hints:
            delay = min(900, max(0, math.floor(hint.due - self.clock.now)))
            visible = self.clock.now + delay + self.rng.uniform(*DELIVERY)
            heapq.heappush(self.deliveries, (visible, next(self._order), hint))


def _napper(ctx: Any, seconds: float) -> Any:
    yield ctx.sleep(seconds)
    return "rested"


FLOWS = {"napper": workflow("napper").execute(_napper)}


def run(rate_per_minute: float, seconds: float, workers: int, seed: int = 7) -> dict[str, Any]:
    """Start ``rate_per_minute`` runs sleeping 5 s for ``seconds``; fire by hints alone."""
    start = 1_767_225_600.0
    clock = Clock(start)
    rng = random.Random(seed)
    storage = LatentStorage(MemoryStorage(), clock)
    queue = ModelQueue(clock, rng)

    def engine() -> Engine:
        return Engine.create(
            storage,
            FLOWS,
            ownership="workflow-lease",
            background_tasks="manual",
            recover=False,
            clock=clock,
            max_clock_skew=math.inf,
            timer_hints=queue,
        )

    starter, pool = engine(), [engine() for _ in range(workers)]
    free_at = [start] * workers
    count = max(1, int(rate_per_minute * seconds / 60))
    gap = 60.0 / rate_per_minute
    due: dict[str, float] = {}
    lateness: list[float] = []
    fire_wru: list[int] = []
    starts = [(start + i * gap, f"r{i}") for i in range(count)]
    index = 0
    while index < len(starts) or queue.deliveries:
        next_start = starts[index][0] if index < len(starts) else math.inf
        next_delivery = queue.deliveries[0][0] if queue.deliveries else math.inf
        if next_start <= next_delivery:
            clock.now, run_id = starts[index]
            index += 1
            with starter.invocation():
                starter.start("napper", 5.0, id=run_id)
            due[run_id] = starts[index - 1][0] + 5.0
            continue
        visible, _, hint = heapq.heappop(queue.deliveries)
        batch = [hint]  # the mapping hands over what is visible, up to 10
        while queue.deliveries and queue.deliveries[0][0] <= visible and len(batch) < 10:
            batch.append(heapq.heappop(queue.deliveries)[2])
        worker = min(range(workers), key=free_at.__getitem__)
        clock.now = max(visible, free_at[worker])
        before = storage.wru
        with pool[worker].invocation():
            report = pool[worker].fire_timer_hints(batch, wait=_advance(clock))
        free_at[worker] = clock.now
        if report.fired:
            fire_wru.append((storage.wru - before) // len(report.fired))
        for fired in report.fired:
            lateness.append(clock.now - fired.due)
    lateness.sort()
    return {
        "timers": len(lateness),
        "p50": statistics.median(lateness),
        "p99": lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))],
        "max": lateness[-1],
        "wru_per_fire": statistics.mean(fire_wru) if fire_wru else 0.0,
        "sends": queue.sends,
    }


def _advance(clock: Clock) -> Callable[[float], None]:
    def wait(seconds: float) -> None:
        clock.now += seconds

    return wait


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="virtual seconds per rate")
    args = parser.parse_args()
    print("timer lateness with hints (virtual time; DynamoDB 6 ms, SQS send 15 ms,")
    print("delivery 20-250 ms after the delay; lateness = fired - due)")
    print(f"{'timers/min':>11} {'workers':>8} {'timers':>7} {'p50 s':>7} {'p99 s':>7} {'max s':>7}")
    wru = 0.0
    rows = [(10, 1), (1_000, 4), (100_000, 200)]
    for rate, workers in rows:
        seconds = max(args.seconds, 6.0 * 60 / rate)  # at least six timers at each rate
        figures = run(rate, seconds, workers)
        wru = max(wru, figures["wru_per_fire"])
        print(
            f"{rate:>11,} {workers:>8} {figures['timers']:>7,} {figures['p50']:>7.3f} "
            f"{figures['p99']:>7.3f} {figures['max']:>7.3f}"
        )
    print(f"\nwrite units per fired timer (billed from the firing's writes): {wru:.1f}")
    print("(the whole firing: the timer read and delete and the drive it wakes, which here")
    print(" ends the run; bench/between_steps.py bills a fired sleep on the wire)")
    print(
        f"burst of {BURST:,} timers due in one second at {WRITE_QUOTA:,} WRU/s: "
        f"drains in {BURST * wru / WRITE_QUOTA:.1f} s (write quota bound; workers scale out)"
    )
    per_million = 1e6 / 10 * SQS_PRICE + 1e6 * 2 * SQS_PRICE / 10
    print(
        f"hint cost per million timers: ${per_million:.2f} in SQS requests "
        "(a send and a receive-and-delete per batch of 10), plus the worker's Lambda time"
    )
    print(
        f"idle cost per month: {IDLE_POLLS_A_MONTH:,} empty long polls = "
        f"${IDLE_POLLS_A_MONTH * SQS_PRICE:.2f} (SQS requests of the event source mapping)"
    )


if __name__ == "__main__":
    main()
