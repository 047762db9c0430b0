"""Timer hints (ADR 0054): sent after the commit that armed a timer, fired from the record.

A hint lost, duplicated, early or reordered changes nothing: the stored timer decides, and
the sweep still fires every timer. Time is virtual: an early hint waits on the test clock.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from engine_helpers import T0

from weft_serverless import ConfigurationError, workflow
from weft_serverless.engine.process.timer_hints import BATCH
from weft_serverless.engine.timer_hints import REHINT_WINDOW, TimerHintReport
from weft_serverless.storage import keys
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import (
    CrashingStorage,
    RecordingTimerHints,
    SimulatedCrash,
    TestEngine,
    VirtualClock,
)

CALLS: dict[str, int] = {}


def _tick(label: str) -> str:
    CALLS[label] = CALLS.get(label, 0) + 1
    return label


def _sleeper(ctx: Any, seconds: float) -> Any:
    yield ctx.run("tick", f"before-{ctx.workflow_id}")
    yield ctx.sleep(seconds)
    yield ctx.run("tick", f"after-{ctx.workflow_id}")
    return "done"


SLEEPER = {"sleeper": workflow("sleeper").activities(tick=_tick).execute(_sleeper)}


@pytest.fixture(autouse=True)
def _calls() -> None:
    CALLS.clear()


def _engine(
    port: RecordingTimerHints,
    storage: Any = None,
    ownership: str = "workflow-lease",
    clock: VirtualClock | None = None,
) -> TestEngine:
    return TestEngine(SLEEPER, storage=storage, clock=clock, ownership=ownership, timer_hints=port)


def _timers(storage: Any) -> list[str]:
    return [
        sort
        for shard in range(keys.TIMER_SHARDS)
        for sort, _ in storage.scan(keys.timer_partition(shard))
    ]


def test_a_sleep_is_hinted_once_after_its_commit_and_the_inline_wake_up_is_not() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    hints = port.take()
    assert [(h.workflow_id, h.due) for h in hints] == [("r1", T0 + 5.0)]
    assert hints[0].sort == _timers(te.storage)[0]  # the stored key, nothing else
    assert port.batches == [1]


def test_a_due_hint_fires_the_run_at_due_and_the_timer_is_gone() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    te.clock.advance(5.0)
    report = te.engine.fire_timer_hints(port.take(), wait=te.clock.advance)
    assert [h.workflow_id for h in report.fired] == ["r1"]
    assert report.max_lateness == 0.0
    assert te.describe("r1").status == "completed"
    assert _timers(te.storage) == []
    assert te.engine.runtime.metrics.counters["timer_hints_fired"] == 1


def test_a_duplicated_hint_fires_once() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    hints = port.take()
    te.clock.advance(5.0)
    first = te.engine.fire_timer_hints(hints + hints, wait=te.clock.advance)
    second = te.engine.fire_timer_hints(hints, wait=te.clock.advance)
    assert len(first.fired) == 1 and first.absent == []
    assert second.fired == [] and second.absent == hints
    assert CALLS["after-r1"] == 1


def test_an_early_hint_is_sent_again_with_the_delay_left_and_fires_nothing() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    hints = port.take()
    te.clock.advance(1.0)
    report = te.engine.fire_timer_hints(hints, wait=te.clock.advance)
    assert report.fired == [] and [(h, round(d, 3)) for h, d in report.resend] == [(hints[0], 4.0)]
    assert port.take() == hints  # re-sent through the engine's port
    assert te.describe("r1").status == "running" and "after-r1" not in CALLS
    assert len(_timers(te.storage)) == 1


def test_a_hint_due_within_a_second_waits_on_the_engine_clock_never_fires_early() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    te.clock.advance(4.4)
    waited: list[float] = []

    def wait(seconds: float) -> None:
        waited.append(seconds)
        te.clock.advance(seconds)

    report = te.engine.fire_timer_hints(port.take(), wait=wait)
    assert len(report.fired) == 1 and report.resend == []
    assert waited == [pytest.approx(0.6)]
    assert te.clock() >= T0 + 5.0
    assert te.describe("r1").status == "completed"


def test_a_lost_hint_is_fired_by_the_sweep() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    port.take()  # lost
    report = te.advance(5.0)
    assert report.timers_fired == 1
    assert te.describe("r1").status == "completed"


def test_reordered_hints_fire_each_run_at_its_own_due_time() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 3.0, id="early")
    te.start("sleeper", 3.5, id="late")
    hints = list(reversed(port.take()))
    assert [h.workflow_id for h in hints] == ["late", "early"]
    te.clock.advance(3.0)
    report = te.engine.fire_timer_hints(hints, wait=te.clock.advance)
    assert [h.workflow_id for h in report.fired] == ["early", "late"]  # due order
    assert te.clock() == pytest.approx(T0 + 3.5)
    assert {te.describe(r).status for r in ("early", "late")} == {"completed"}


def test_a_hint_racing_the_sweep_does_the_work_once() -> None:
    port = RecordingTimerHints()
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")
    te.start("sleeper", 5.0, id="r2")
    hints = port.take()
    te.clock.advance(5.0)
    # r1: the hint fires first, then the sweep; r2: the sweep first, then the hint.
    first = te.engine.fire_timer_hints([h for h in hints if h.workflow_id == "r1"])
    sweep = te.engine.run_maintenance()
    late = te.engine.fire_timer_hints([h for h in hints if h.workflow_id == "r2"])
    assert len(first.fired) == 1 and sweep.timers_fired == 1 and len(late.absent) == 1
    assert CALLS["after-r1"] == CALLS["after-r2"] == 1


def test_two_workers_firing_one_hint_at_once_run_the_step_once() -> None:
    storage = MemoryStorage()
    port = RecordingTimerHints()
    te = _engine(port, storage)
    with te.engine.invocation():  # as a Lambda invocation: the parked run's claim is let go
        te.start("sleeper", 5.0, id="r1")
    hints = port.take()
    workers = [_engine(RecordingTimerHints(), storage, clock=te.clock) for _ in range(2)]
    te.clock.advance(5.0)
    barrier = threading.Barrier(2)
    reports: list[TimerHintReport] = []

    def fire(worker: TestEngine) -> None:
        barrier.wait()
        reports.append(worker.engine.fire_timer_hints(hints))

    threads = [threading.Thread(target=fire, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert CALLS["after-r1"] == 1
    assert sorted(len(r.fired) + len(r.kept) + len(r.absent) for r in reports) == [1, 1]
    assert te.describe("r1").status == "completed"
    assert _timers(storage) == []


def test_a_failing_hint_port_never_fails_the_call_and_is_counted() -> None:
    port = RecordingTimerHints(failing=True)
    te = _engine(port)
    te.start("sleeper", 5.0, id="r1")  # no error
    assert te.engine.runtime.metrics.counters["timer_hints_failed"] == 1
    assert te.advance(5.0).timers_fired == 1  # the sweep fires it


def test_hints_of_one_call_go_in_batches_of_ten() -> None:
    def fan(ctx: Any, n: int) -> Any:
        yield ctx.all(*(ctx.sleep(1.0 + i) for i in range(n)))

    port = RecordingTimerHints()
    te = TestEngine(
        {"fan": workflow("fan").execute(fan)}, ownership="workflow-lease", timer_hints=port
    )
    te.start("fan", 23, id="f")
    assert port.batches == [BATCH, BATCH, 3]


def test_a_timer_beyond_the_horizon_is_hinted_by_the_pass_that_sees_it_come_in_reach() -> None:
    port = RecordingTimerHints(horizon=900.0)
    te = _engine(port)
    te.start("sleeper", 2000.0, id="r1")
    assert port.take() == []  # too far for one delayed message
    te.advance(2000.0 - 900.0 - 1.0)  # one second out of reach still
    assert port.take() == []
    report = te.advance(REHINT_WINDOW / 2)  # the next pass, a minute on
    assert report.parts["timers_hinted"] == 1
    hints = port.take()
    assert [(h.workflow_id, h.due) for h in hints] == [("r1", T0 + 2000.0)]
    # A tick loop's next passes do not hint it again; another process's pass might (harmless).
    assert te.advance(1.0).parts["timers_hinted"] == 0
    assert te.advance(1.0).parts["timers_hinted"] == 0
    assert port.take() == []


def test_no_port_means_nothing_is_hinted_and_a_bad_port_is_refused() -> None:
    te = TestEngine(SLEEPER, ownership="workflow-lease")
    te.start("sleeper", 5.0, id="r1")
    assert "timers_hinted" not in te.advance(1.0).parts
    with pytest.raises(ConfigurationError):
        TestEngine(SLEEPER, timer_hints=object())


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_every_write_of_the_hint_path_loses_nothing(when: str) -> None:
    probe = _fired_writes()
    assert probe >= 2
    for n in range(1, probe + 1):
        CALLS.clear()
        memory = MemoryStorage()
        port = RecordingTimerHints()
        te = _engine(port, memory)
        with te.engine.invocation():
            te.start("sleeper", 5.0, id="r1")
        hints = port.take()
        crashing = CrashingStorage(memory)
        with te.engine.invocation():
            te.recover(crashing)  # a fresh worker, before the timer is due
        te.clock.advance(5.0)
        crashing.writes = 0
        if when == "before":
            crashing.crash_before_write = n
        else:
            crashing.crash_after_write = n
        with pytest.raises(SimulatedCrash):
            te.engine.fire_timer_hints(hints)
        te.crash()
        te.recover(memory)
        te.engine.fire_timer_hints(hints)  # the hint is redelivered
        te.advance(60.0)  # and the sweep runs
        assert te.describe("r1").status == "completed", (when, n)
        assert _timers(memory) == [], (when, n)
        assert CALLS["after-r1"] <= 2, (when, n)  # at most once more than the crash


def _fired_writes() -> int:
    memory = MemoryStorage()
    port = RecordingTimerHints()
    te = _engine(port, memory)
    with te.engine.invocation():
        te.start("sleeper", 5.0, id="r1")
    crashing = CrashingStorage(memory)
    with te.engine.invocation():
        te.recover(crashing)
    te.clock.advance(5.0)
    crashing.writes = 0
    te.engine.fire_timer_hints(port.take())
    return crashing.writes


class _Announcing(RecordingTimerHints):
    """Records like its parent, and says when a hint for ``key_part`` has been sent."""

    def __init__(self, key_part: str) -> None:
        super().__init__()
        self.key_part = key_part
        self.arrived = threading.Event()

    def send(self, hints: Any) -> None:
        super().send(hints)
        if any(self.key_part in hint.sort for hint in hints):
            self.arrived.set()


def _race_then_sleep(ctx: Any, _input: Any) -> Any:
    yield ctx.race(ctx.run("tick", "race"), ctx.sleep(5.0))
    yield ctx.sleep(7.0)
    return "done"


def test_a_background_drive_sends_its_hints_together_when_it_ends() -> None:
    """Automatic mode's background driver drives outside any engine call: its commits' hints
    are held until the drive ends, as an engine call's are. The race's sleep, armed and then
    deleted when the step won, is never hinted; the drive's one batch holds the sleep it
    parked on (per commit, this run sent the lost sleep's hint first, in a batch of its own)."""
    from weft_serverless import Engine

    port = _Announcing("#r1#s00000001")
    flows = {"racer": workflow("racer").activities(tick=_tick).execute(_race_then_sleep)}
    with Engine.create(
        MemoryStorage(), flows, background_tasks="automatic", timer_hints=port
    ) as engine:
        engine.start("racer", id="r1")  # returns at once; the background driver drives
        assert port.arrived.wait(10)
        sent = [hint.sort.split("#", 1)[1] for hint in port.sent]
    assert sent == ["r1#wake", "r1#s00000001"], sent  # the start's call, then the drive's
    assert port.batches == [1, 1]
