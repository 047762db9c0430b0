"""Firing scaled out: several workers splitting (or overlapping on) the timer shards, and
parallel fires inside one pass (ADR 0055).

Each run sleeps, then runs one activity that counts its calls: the activity is the timer's
effect, so "fired once" is "the activity ran once". Under workflow-lease every wake is
fenced, so two engines racing one run end with one of them driving it, whatever their shares.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ownership_support import GRACE, TTL, Opener, make_engine

from weft_serverless import Engine, workflow
from weft_serverless.engine.maintenance import run_maintenance
from weft_serverless.engine.runtime import Budget
from weft_serverless.errors import InvalidArgumentError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key, SortRange, Storage
from weft_serverless.storage.keys.shards import Share
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import CrashingStorage, DelegatingStorage, SimulatedCrash, VirtualClock

RUNS = 12
SLEEP = 5.0


def _make_workflows(
    effects: Counter[str], on_effect: Callable[[], None] | None = None
) -> dict[str, Any]:
    lock = threading.Lock()

    def effect(workflow_id: str) -> str:
        with lock:
            effects[workflow_id] += 1
            if on_effect is not None:
                on_effect()
        return workflow_id

    def napper(ctx: Any, workflow_id: str) -> Any:
        yield ctx.sleep(SLEEP)
        return (yield ctx.run("effect", workflow_id))

    return {"napper": workflow("napper").activities(effect=effect).execute(napper)}


def _park(engine: Engine, ids: list[str]) -> None:
    """(An engine created once they are due drives them as it recovers: the engines whose
    pass a test measures are created with ``recover=False``.)"""
    """Start each run in an invocation, as the API does: parked on its sleep, no claim held."""
    for workflow_id in ids:
        with engine.invocation(time_left=lambda: 60.0):
            engine.start("napper", workflow_id, id=workflow_id)


def _timers_left(store: Storage, engine: Engine) -> int:
    return sum(
        1
        for shard in range(engine.runtime.shards.timers)
        for _ in store.scan(keys.timer_partition(shard))
    )


IDS = [f"run-{n}" for n in range(RUNS)]


@pytest.mark.parametrize(
    "shares",
    [((0, 1), (0, 1)), ((0, 2), (0, 1)), ((0, 2), (1, 2))],
    ids=["both-everything", "overlapping", "disjoint"],
)
@pytest.mark.backends("memory", "sqlite")
def test_two_workers_racing_one_shard_fire_each_timer_s_effect_once(
    storage_factory: Opener, shares: tuple[tuple[int, int], tuple[int, int]]
) -> None:
    clock = VirtualClock()
    effects: Counter[str] = Counter()
    workflows = _make_workflows(effects)
    e1 = make_engine(storage_factory, workflows, "e1", clock)
    e2 = make_engine(storage_factory, workflows, "e2", clock)
    _park(e1, IDS)
    clock.advance(SLEEP + 1)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker(engine: Engine, share: tuple[int, int]) -> None:
        try:
            barrier.wait()
            with engine.invocation(time_left=lambda: 60.0):
                engine.run_maintenance(worker=share[0], workers=share[1], parallel_fires=4)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(engine, share))
        for engine, share in zip((e1, e2), shares, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # A run one engine lost to the other is retained, never lost: later passes finish it.
    for _ in range(3):
        clock.advance(TTL + GRACE + 1)
        e1.run_maintenance(parallel_fires=4)
    assert all(e1.describe(wf).status == "completed" for wf in IDS)
    assert effects == Counter(IDS)  # every effect exactly once
    assert _timers_left(storage_factory(), e1) == 0


def _crash_and_recover(crash: dict[str, int]) -> tuple[Counter[str], CrashingStorage, Engine]:
    clock = VirtualClock()
    effects: Counter[str] = Counter()
    workflows = _make_workflows(effects)
    inner = MemoryStorage()
    setup = make_engine(lambda: inner, workflows, "setup", clock)
    _park(setup, IDS[:6])
    clock.advance(SLEEP + 1)
    crashing = CrashingStorage(inner)
    crashed = make_engine(lambda: crashing, workflows, "crashed", clock, recover=False)
    # Armed only now: the pass's writes are counted, not the engine's bootstrap.
    crashing.writes = 0
    crashing.crash_before_write = crash.get("crash_before_write")
    crashing.crash_after_write = crash.get("crash_after_write")
    try:
        with crashed.invocation(time_left=lambda: 60.0):
            crashed.run_maintenance(parallel_fires=4)
    except SimulatedCrash:
        pass
    survivor = make_engine(lambda: inner, workflows, "survivor", clock)
    for _ in range(4):
        clock.advance(TTL + GRACE + 1)
        survivor.run_maintenance(parallel_fires=4)
    return effects, crashing, survivor


def test_a_crash_at_every_write_of_a_parallel_pass_loses_nothing() -> None:
    _, measured, _ = _crash_and_recover({})
    assert measured.writes >= 6  # each run's fire commits at least once
    # Threads interleave, so the write numbered n differs between runs: crash at every number
    # up to a margin past the measured count, before and after the write.
    for n in range(1, measured.writes + 4):
        for when in ("crash_before_write", "crash_after_write"):
            effects, crashing, survivor = _crash_and_recover({when: n})
            for workflow_id in IDS[:6]:
                assert survivor.describe(workflow_id).status == "completed", (when, n)
            # At most once more than the one crash that hit it.
            assert set(effects) == set(IDS[:6]) and max(effects.values()) <= 2, (when, n)
            assert sum(effects.values()) <= 6 + 4, (when, n)  # a crash stops at most 4 threads
            assert _timers_left(crashing.inner, survivor) == 0, (when, n)


class _FailsOnce(DelegatingStorage):
    """Raises a plain ``RuntimeError`` (no ``WeftError``: a bug, an unmapped client error) on
    the first read of one run's partition."""

    def __init__(self, inner: Storage, workflow_id: str) -> None:
        super().__init__(inner)
        self.partition = keys.workflow_partition(workflow_id)
        self.armed = False
        self.failed = False

    def _trip(self, partition: str) -> None:
        if self.armed and partition == self.partition and not self.failed:
            self.failed = True
            raise RuntimeError("unexpected failure")

    def _get(self, key: Key) -> bytes | None:
        self._trip(key.partition)
        return super()._get(key)

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        self._trip(partition)
        return super()._scan(partition, rng, limit, reverse)


def test_a_thread_s_exception_stops_no_other_and_its_timer_is_retained() -> None:
    clock = VirtualClock()
    effects: Counter[str] = Counter()
    workflows = _make_workflows(effects)
    inner = MemoryStorage()
    _park(make_engine(lambda: inner, workflows, "setup", clock), IDS)
    clock.advance(SLEEP + 1)
    failing = _FailsOnce(inner, IDS[3])
    engine = make_engine(lambda: failing, workflows, "e1", clock, recover=False)
    failing.armed = True

    report = engine.run_maintenance(parallel_fires=4)

    assert failing.failed
    assert report.timers_fired == RUNS - 1
    assert report.parts["timers_retained"] == 1
    assert effects == Counter(wf for wf in IDS if wf != IDS[3])
    assert engine.describe(IDS[3]).status == "running"
    engine.run_maintenance(parallel_fires=4)
    assert engine.describe(IDS[3]).status == "completed"
    assert effects == Counter(IDS)


def test_the_budget_cut_stops_every_thread() -> None:
    clock = VirtualClock()
    effects: Counter[str] = Counter()
    elapsed = [0.0]

    def tick() -> None:
        elapsed[0] += 1.0  # each fire spends a second of the pass's budget

    def monotonic() -> float:
        return elapsed[0]

    workflows = _make_workflows(effects, tick)
    inner = MemoryStorage()
    _park(make_engine(lambda: inner, workflows, "setup", clock), IDS)
    clock.advance(SLEEP + 1)
    engine = make_engine(lambda: inner, workflows, "e1", clock, recover=False)
    budget = Budget(deadline=3.0, monotonic=monotonic)
    report = run_maintenance(
        engine.runtime, engine._session.dispatcher, None, budget, Share(), parallel=4
    )

    assert report.cut_short
    # Threads already in a fire when the budget ran out finish it; none starts another.
    assert 3 <= report.timers_fired <= 3 + 4 - 1
    assert sum(effects.values()) == report.timers_fired
    assert _timers_left(inner, engine) == RUNS - report.timers_fired
    assert "timers_retained" not in report.parts  # cut, not failed: left where they were
    clock.advance(1)
    engine.run_maintenance(parallel_fires=4)
    assert effects == Counter(IDS)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"worker": 1, "workers": 1}, "worker"),
        ({"worker": -1, "workers": 2}, "worker"),
        ({"workers": 0}, "workers"),
        ({"workers": 257}, "workers"),
        ({"parallel_fires": 0}, "parallel_fires"),
        ({"parallel_fires": True}, "parallel_fires"),
    ],
)
def test_a_bad_share_or_parallelism_is_refused_before_anything_is_read(
    options: dict[str, Any], field: str
) -> None:
    clock = VirtualClock()
    inner = MemoryStorage()
    engine = make_engine(lambda: inner, _make_workflows(Counter()), "e1", clock)
    with pytest.raises(InvalidArgumentError) as caught:
        engine.run_maintenance(**options)
    assert caught.value.field == field  # type: ignore[attr-defined]
