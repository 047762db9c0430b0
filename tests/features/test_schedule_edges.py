"""Schedules at the edges the fuzzer and the time bounds reached (ADR 0040), on every backend.

* A fire whose run was purged can start again: under ``workflow-lease`` its owner epoch
  survives the purge, and the schedule's start now claims on top of it, as ``Engine.start``
  does (every attempt was refused, and the call ended in a 500: "kept racing other
  writers").
* A schedule yields no fire after the latest instant (9999-12-31T23:59:59.999Z): a cron
  expression whose next match is in the year 10000 raised ``OverflowError`` from cronsim.
* A ``start_at`` far in the future fires at ``start_at`` itself: subtracting a microsecond
  is lost to float rounding from the year 2514 (2**34 s) on.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import Opener

from weft_serverless import Engine, workflow
from weft_serverless.engine.schedules.firing import run_id
from weft_serverless.testing import VirtualClock
from weft_serverless.time_values import MAX_INSTANT

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def _report(ctx: Any, input: Any) -> Any:
    return input
    yield  # a generator that ends at once


WORKFLOWS = {"report": workflow("report").execute(_report)}


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(T0)


def _engine(storage_factory: Opener, clock: VirtualClock, ownership: str = "none") -> Engine:
    return Engine.create(
        storage_factory(),
        WORKFLOWS,
        background_tasks="manual",
        clock=clock,
        ownership=ownership,
        engine_id="e1",
    )


OWNERSHIPS = pytest.mark.parametrize("ownership", ["none", "workflow-lease"])


@OWNERSHIPS
def test_a_trigger_after_its_run_was_purged_starts_it_again(
    storage_factory: Opener, clock: VirtualClock, ownership: str
) -> None:
    engine = _engine(storage_factory, clock, ownership)
    handle = engine.schedule("s", "report", every="1h")
    first = handle.trigger()
    assert first is not None and first.describe().status == "completed"
    engine.purge(first.id)
    again = handle.trigger()  # the same second: the same run id, purged
    assert again is not None and again.id == first.id
    assert again.describe().status == "completed"
    assert handle.describe().fired == 2


@OWNERSHIPS
def test_a_backfill_over_a_purged_fire_starts_it_again(
    storage_factory: Opener, clock: VirtualClock, ownership: str
) -> None:
    engine = _engine(storage_factory, clock, ownership)
    clock.advance(3600)
    handle = engine.schedule("b", "report", every="15m", overlap="allow")
    [first, *_] = handle.backfill(T0, T0 + 1800)
    engine.purge(first.id)
    assert [run.id for run in handle.backfill(T0, T0 + 1800)] == [run_id("b", T0)]
    assert engine.describe(run_id("b", T0)).status == "completed"


def test_no_fire_is_due_after_the_latest_instant(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    cron = engine.schedule("c", "report", cron="0 0 1 1 *", start_at=MAX_INSTANT - 10)
    assert cron.describe().next_fire_at is None
    every = engine.schedule("e", "report", every="100d", start_at=MAX_INSTANT)
    assert every.describe().next_fire_at == MAX_INSTANT  # start_at itself fires


def test_a_far_start_at_fires_at_itself(storage_factory: Opener, clock: VirtualClock) -> None:
    engine = _engine(storage_factory, clock)
    far = 20_000_000_000.0  # the year 2603: a microsecond less is the same float
    assert far - 1e-6 == far
    handle = engine.schedule("f", "report", every="1h", start_at=far)
    assert handle.describe().next_fire_at == far
