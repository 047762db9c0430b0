"""A step's in-memory work does not grow with the run's history.

The scan for a finishing step's stale timers walks the run's pending facts and retry records;
an entry left behind for every plain step made that scan, and so a long run, quadratic.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections import deque
from collections.abc import Generator
from typing import Any

import pytest

from weft_serverless import MemoryStorage, RetryPolicy, workflow
from weft_serverless.codec import decode
from weft_serverless.engine.persistence import timers as steps
from weft_serverless.engine.persistence.records import History, load_history
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import TestEngine


def _count(x: int) -> int:
    return x


def _many(ctx: Any, n: int) -> Generator[Any, Any, int]:
    for i in range(n):
        yield ctx.run("count", i)
    return n


def test_the_stale_timer_scan_of_a_step_does_not_grow_with_the_steps_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scanned: list[int] = []
    real = steps.stale_timer_deletes

    def counting(history: History, slot: str, now: float) -> Any:
        scanned.append(len(history.pending) + len(history.attempts))
        return real(history, slot, now)

    monkeypatch.setattr(steps, "stale_timer_deletes", counting)
    te = TestEngine({"many": workflow("many").activities(count=_count).execute(_many)})
    assert te.start("many", 200, id="m").result() == 200
    assert scanned == []  # nothing parked or retried: a step does not look for stale timers


# -- per-step work, measured as counts, at step 100 and at step 1,000 ---------------------

STEPS = 1000
PROBES = {"early": range(100, 110), "late": range(STEPS - 10, STEPS)}
_NOW = RetryPolicy(max_attempts=3, initial_backoff=0.0)


class _Meter:
    """Counts the drive's Python-level events (calls, returns, builtin calls) and reads the
    store's request counters each time a step's activity succeeds, so the difference between
    two successes is exactly the work of one step."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.events = 0
        self.marks: list[dict[str, int]] = []
        self.failed: set[int] = set()

    def count(self, frame: Any, event: str, arg: Any) -> None:
        self.events += 1

    def flaky(self, index: int) -> int:
        """Fails the first attempt of every step, so each step leaves a retry record."""
        if index not in self.failed:
            self.failed.add(index)
            raise RuntimeError("first attempt fails")
        self.marks.append({"events": self.events, **self.storage.stats.snapshot()})
        return index

    def per_step(self, steps: range) -> list[dict[str, int]]:
        return [
            {name: self.marks[i][name] - self.marks[i - 1][name] for name in self.marks[i]}
            for i in steps
        ]


def _leaves_timers(ctx: Any, n: int) -> Generator[Any, Any, int]:
    # Each step parks a one-hour sleep (a pending record and its timer) and retries an
    # activity once (a retry record): the step's commit must find the sleep's timer among
    # its own records and delete it, whatever the run left before.
    for i in range(n):
        yield ctx.race(ctx.sleep(3600), ctx.run("flaky", i, retry=_NOW))
    return n


def test_a_steps_work_at_step_1000_is_its_work_at_step_100(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = MemoryStorage()
    meter = _Meter(storage)
    te = TestEngine(
        {"leaves": workflow("leaves").activities(flaky=meter.flaky).execute(_leaves_timers)},
        storage=storage,
        max_parallel_activities=0,  # every attempt on the drive's thread: counts are exact
    )
    monkeypatch.setattr(logging.getLogger("weft_serverless.engine"), "disabled", True)
    gc.disable()  # a collection may run finalisers of earlier objects: not the step's work
    sys.setprofile(meter.count)
    try:
        handle = te.start("leaves", STEPS, id="long")
    finally:
        sys.setprofile(None)
        gc.enable()
    assert handle.result() == STEPS
    early, late = meter.per_step(PROBES["early"]), meter.per_step(PROBES["late"])
    assert early == late
    # What each step costs the store: a parked sleep, a retry record, the step (3 writes).
    assert early[0]["requests"] == 3
    assert early[0]["scanned_items"] == 0
    # And the lookup found what it had to: every step deleted its sleep's timer; the retry
    # timers, due at once, are left to the maintenance pass (ADR 0002).
    assert _timer_kinds(storage) == {"retry": STEPS}


def _timer_kinds(storage: Storage) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for shard in range(keys.TIMER_SHARDS):
        for _, value in storage.scan(keys.timer_partition(shard)):
            kind = decode(value)["kind"]
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _waits(ctx: Any, n: int) -> Generator[Any, Any, list[Any]]:
    yield ctx.sleep(1)
    got = []
    for _ in range(n):
        got.append((yield ctx.wait_for_signal("s")))
    return got


def test_buffered_signals_are_taken_from_the_front_of_a_deque() -> None:
    """A drive consuming many buffered signals takes each from the front of its queue: a
    deque, so the step that takes the last costs what the first did (a list's pop(0) moves
    every signal still queued behind it)."""
    te = TestEngine({"waits": workflow("waits").execute(_waits)})
    te.start("waits", 3, id="w")
    for value in range(3):
        te.signal("w", "s", value)
    history = load_history(te.storage, "w")
    assert history is not None
    assert isinstance(history.signals["s"], deque)
    te.advance(1)
    assert te.get_handle("w").result() == [0, 1, 2]
