"""Manual triggers (``ScheduleHandle.trigger``, the API's and console's "trigger now") are
an operator's explicit acts: each one is a fire of its own, with a run id that no scheduled
fire and no other trigger can have (ADR 0043). Two triggers within one second are two runs;
a trigger in the second of a scheduled fire takes nothing from it; a trigger queued by the
``queue`` policy starts later under its own id."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from feature_support import Opener

from weft_serverless import Engine, WorkflowBusyError, workflow
from weft_serverless.engine.schedules.firing import MANUAL_MARKS
from weft_serverless.testing import VirtualClock

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
MIN = 60.0


def _report(ctx: Any, input: Any) -> Any:
    return input
    yield  # a generator that ends at once


def _long(ctx: Any, input: Any) -> Any:
    yield ctx.wait_for_signal("done")
    return input


WORKFLOWS = {
    "report": workflow("report").execute(_report),
    "long": workflow("long").execute(_long),
}


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(T0)


def _engine(storage_factory: Opener, clock: VirtualClock) -> Engine:
    return Engine.create(storage_factory(), WORKFLOWS, background_tasks="manual", clock=clock)


def _fire_id(schedule_id: str, at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return f"{schedule_id}-{moment:%Y%m%dT%H%M%SZ}"


def _manual_id(schedule_id: str, at: float, nth: int) -> str:
    return _fire_id(schedule_id, at)[:-1] + MANUAL_MARKS[nth]


def test_two_triggers_within_a_second_start_two_runs(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("twice", "report", every="1d", overlap="allow")
    clock.advance(90.25)
    first, second = h.trigger(), h.trigger()
    assert first is not None and second is not None
    assert [first.id, second.id] == [_manual_id("twice", T0 + 90, n) for n in (0, 1)]
    assert first.result() == second.result() is None
    assert sorted(s.id for s in engine.list()) == [first.id, second.id]
    assert h.describe().fired == 2


def test_a_trigger_in_the_second_of_a_scheduled_fire_takes_nothing_from_it(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("same", "report", every="1m", overlap="allow")
    clock.advance(MIN)  # the fire at T0 + 1 min is due; the pass has not fired it yet
    triggered = h.trigger()
    assert triggered is not None and triggered.id == _manual_id("same", T0 + MIN, 0)
    report = engine.run_maintenance(clock())
    assert report.timers_fired == 1 and "timers_retained" not in report.parts
    d = h.describe()
    assert (d.fired, d.next_fire_at) == (2, T0 + 2 * MIN)
    runs = sorted(s.id for s in engine.list())
    assert runs == sorted([_fire_id("same", T0 + MIN), triggered.id])


def test_a_queued_trigger_starts_later_under_its_own_id(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("q", "long", every="1d", overlap="queue")
    clock.advance(30)
    running = h.trigger()
    assert running is not None and running.id == _manual_id("q", T0 + 30, 0)
    assert h.trigger() is None  # the run is still going: this fire waits
    assert h.describe().queued_fire_at == T0 + 30
    assert h.trigger() is None  # one fire waits at most: this one is skipped
    engine.signal(running.id, "done")  # its end arms the schedule
    engine.run_maintenance(clock())
    queued = _manual_id("q", T0 + 30, 1)
    assert engine.describe(queued).status == "running"
    d = h.describe()
    assert (d.fired, d.skipped, d.queued_fire_at, d.running) == (2, 1, None, [queued])


def test_triggers_beyond_the_marks_of_one_second_are_told_to_retry(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("busy", "report", every="1d", overlap="allow")
    started = {run.id for run in (h.trigger() for _ in MANUAL_MARKS) if run is not None}
    assert len(started) == len(MANUAL_MARKS)
    with pytest.raises(WorkflowBusyError) as raised:
        h.trigger()
    assert "next second" in str(raised.value)
    clock.advance(1)
    assert h.trigger() is not None
    assert h.describe().fired == len(MANUAL_MARKS) + 1
