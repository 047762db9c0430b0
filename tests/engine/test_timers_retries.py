"""Durable timers and activity retries, all on the virtual clock.

Nothing here sleeps for a timer: ``advance`` moves virtual time and runs one maintenance pass.
Each timing test checks both edges: just before the due time nothing happens, at it the
step fires exactly once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import pytest
from engine_helpers import T0, Opener, advance_to, make_engine, op_signatures, stored_timers

from weft_serverless import (
    ActivityFailedError,
    InvalidArgumentError,
    RetryPolicy,
    WorkflowDefinition,
    WorkflowFailedError,
    workflow,
)
from weft_serverless.commands import parse_duration
from weft_serverless.testing import TestEngine, VirtualClock


def _noop(value: Any = None) -> Any:
    return value


def _sleeper(ctx: Any, duration: Any) -> Any:
    before = yield ctx.run("tick", "before")
    yield ctx.sleep(duration)
    after = yield ctx.run("tick", "after")
    return [before, after]


SLEEPER = {"sleeper": workflow("sleeper").activities(tick=_noop).execute(_sleeper)}


# -- sleep -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        ("500ms", 0.5),
        ("10s", 10.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        (dt.timedelta(minutes=1, seconds=30), 90.0),
        (42, 42.0),
        (1.25, 1.25),
    ],
    ids=["500ms", "10s", "5m", "2h", "1d", "timedelta", "int", "float"],
)
def test_sleep_fires_once_at_its_due_time_not_before(
    storage_factory: Opener, duration: Any, seconds: float
) -> None:
    """A sleep of any duration form wakes exactly at due: not 1 ms early, then once."""
    te = make_engine(storage_factory, SLEEPER)
    tick = te.mock("tick", impl=lambda label: label)
    handle = te.start("sleeper", duration, id="s")
    assert tick.calls == ["before"]
    assert stored_timers(te.storage) == [(T0 + seconds, "s")]

    report = advance_to(te, T0 + seconds - 0.001)
    assert tick.calls == ["before"]
    assert te.describe("s").status == "running"

    report = te.advance(0.001)
    assert report.timers_fired == 1
    assert tick.calls == ["before", "after"]
    assert handle.result() == ["before", "after"]
    assert stored_timers(te.storage) == []

    report = te.advance(seconds)
    assert report.timers_fired == 0
    assert tick.calls == ["before", "after"]


def test_zero_sleep_completes_without_a_timer(storage_factory: Opener) -> None:
    """``sleep(0)`` is a recorded step that completes inline and stores no timer."""
    te = make_engine(storage_factory, SLEEPER)
    te.mock("tick", impl=lambda label: label)
    handle = te.start("sleeper", "0s", id="s")
    assert handle.result() == ["before", "after"]
    assert op_signatures(te.storage, "s") == ["run:tick", "sleep", "run:tick"]
    assert stored_timers(te.storage) == []


def test_manual_mode_fires_nothing_by_itself(storage_factory: Opener) -> None:
    """With the clock past due but no maintenance call, the sleep stays parked."""
    te = make_engine(storage_factory, SLEEPER)
    tick = te.mock("tick", impl=lambda label: label)
    handle = te.start("sleeper", "10s", id="s")
    te.clock.advance(3600)
    assert tick.calls == ["before"]
    with pytest.raises(TimeoutError):
        handle.result()
    report = te.run_maintenance()
    assert report.timers_fired == 1 and report.workflows_driven == 1
    assert handle.result() == ["before", "after"]


def test_run_maintenance_at_an_explicit_now_fires_what_is_due_then_exactly_once(
    storage_factory: Opener,
) -> None:
    """``run_maintenance(now)`` fires every timer due at ``now`` even if the clock lags; a
    second pass at the same ``now`` fires nothing."""
    te = make_engine(storage_factory, SLEEPER)
    tick = te.mock("tick", impl=lambda label: label)
    te.start("sleeper", "10s", id="early")
    te.start("sleeper", "20s", id="middle")
    te.start("sleeper", "30s", id="late")

    report = te.run_maintenance(now=T0 + 9.999)
    assert (report.timers_fired, report.workflows_driven) == (0, 0)
    assert report.next_due == T0 + 10

    report = te.run_maintenance(now=T0 + 20)
    assert report.timers_fired == 2
    assert report.workflows_driven == 2
    assert report.max_lateness == pytest.approx(10.0)
    assert report.next_due == T0 + 30
    assert te.describe("early").status == "completed"
    assert te.describe("middle").status == "completed"
    assert te.describe("late").status == "running"
    assert tick.call_count == 3 + 2

    again = te.run_maintenance(now=T0 + 20)
    assert (again.timers_fired, again.workflows_driven) == (0, 0)
    assert tick.call_count == 5


def test_maintenance_report_when_nothing_is_scheduled(storage_factory: Opener) -> None:
    """An idle pass reports nothing fired and no next due time."""
    te = make_engine(storage_factory, SLEEPER)
    report = te.advance(5)
    assert report.now == T0 + 5
    assert (report.timers_fired, report.workflows_driven, report.next_due) == (0, 0, None)
    assert not report.cut_short


@pytest.mark.parametrize("kind", ["sleep", "retry-backoff"])
def test_timer_due_within_the_same_millisecond_is_not_lost(
    storage_factory: Opener, kind: str
) -> None:
    """A pass 0.2 ms before a due time (same millisecond) must not lose the timer."""
    if kind == "sleep":
        te = make_engine(storage_factory, SLEEPER)
        te.mock("tick", impl=lambda label: label)
        handle = te.start("sleeper", 10.0004, id="s")
        expected: Any = ["before", "after"]
    else:
        te = make_engine(storage_factory, retrying(RetryPolicy(initial_backoff=10.0004)))
        _failing_times(te, 1, Flaky("blip"))
        handle = te.start("retrying", id="s")
        expected = {"value": "ok"}
    te.advance(10.0002)  # same millisecond as the due time, 0.2 ms before it
    assert te.describe("s").status == "running"
    te.advance(1)
    assert handle.result() == expected


# -- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("500ms", 0.5),
        ("10s", 10.0),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1.5s", 1.5),
        (" 3s ", 3.0),
        (dt.timedelta(hours=1), 3600.0),
        (7, 7.0),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_parse_duration_accepts_documented_forms(value: Any, seconds: float) -> None:
    """Strings with ms/s/m/h/d units, timedeltas and numbers all become seconds."""
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    ["5x", "", "s", "10 sec", "-1s", "1.2.3s", -1, float("nan"), True, None, [1], "5M"],
)
def test_parse_duration_rejects_bad_values(value: Any) -> None:
    """Anything else is an InvalidArgumentError whose message names the argument."""
    with pytest.raises(InvalidArgumentError) as info:
        parse_duration(value, "sleep duration")
    assert info.value.code == "InvalidArgumentError"
    assert "sleep duration" in str(info.value)


@pytest.mark.parametrize("duration", ["soon", "-5s", -1])
def test_bad_sleep_duration_fails_the_run_with_invalid_argument(
    storage_factory: Opener, duration: Any
) -> None:
    """A bad duration at ``ctx.sleep`` fails the run with InvalidArgumentError, no timer."""
    te = make_engine(storage_factory, SLEEPER)
    te.mock("tick", impl=lambda label: label)
    handle = te.start("sleeper", duration, id="s")
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    assert info.value.error_type == "InvalidArgumentError"
    assert "sleep duration" in info.value.error_message
    assert stored_timers(te.storage) == []


# -- retries ---------------------------------------------------------------------------------


class Flaky(Exception):
    pass


class Fatal(Exception):
    pass


class FatalChild(Fatal):
    pass


def retrying(policy: RetryPolicy | None = None) -> dict[str, WorkflowDefinition]:
    """A workflow running ``work`` under ``policy`` and returning its value or failure."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            value = yield ctx.run("work", retry=policy)
        except ActivityFailedError as exc:
            return {
                "failed": exc.error_type,
                "message": exc.error_message,
                "attempts": exc.attempts,
            }
        return {"value": value}

    return {"retrying": workflow("retrying").activities(work=_noop).execute(body)}


def _failing_times(te: TestEngine, failures: int, error: Exception) -> list[float]:
    """Mock ``work`` to fail ``failures`` times then succeed; returns the list of call times."""
    times: list[float] = []

    def work(_: Any) -> str:
        times.append(te.clock())
        if len(times) <= failures:
            raise error
        return "ok"

    te.mock("work", impl=work)
    return times


def test_retries_follow_backoff_on_the_engine_clock(storage_factory: Opener) -> None:
    """Attempts run at 0, +2, +2+6, +2+6+10 (capped): never a millisecond early."""
    policy = RetryPolicy(max_attempts=4, initial_backoff=2, backoff_multiplier=3, max_backoff=10)
    te = make_engine(storage_factory, retrying(policy))
    times = _failing_times(te, 3, Flaky("try again"))
    handle = te.start("retrying", id="r")
    for due, attempts_before in ((T0 + 2, 1), (T0 + 8, 2), (T0 + 18, 3)):
        advance_to(te, due - 0.001)
        assert len(times) == attempts_before
        advance_to(te, due)
        assert len(times) == attempts_before + 1
    assert times == [T0, T0 + 2, T0 + 8, T0 + 18]
    assert handle.result() == {"value": "ok"}
    assert stored_timers(te.storage) == []
    assert op_signatures(te.storage, "r") == ["run:work"]


def test_default_retry_policy_is_three_attempts_one_then_two_seconds(
    storage_factory: Opener,
) -> None:
    """Without a policy: 3 attempts, backoff 1 s then 2 s, then the error reaches the yield."""
    te = make_engine(storage_factory, retrying())
    times = _failing_times(te, 99, Flaky("still down"))
    handle = te.start("retrying", id="r")
    assert stored_timers(te.storage) == [(T0 + 1, "r")]
    advance_to(te, T0 + 1)
    assert stored_timers(te.storage) == [(T0 + 3, "r")]
    advance_to(te, T0 + 3)
    assert times == [T0, T0 + 1, T0 + 3]
    assert handle.result() == {"failed": "Flaky", "message": "still down", "attempts": 3}
    te.advance(60)
    assert len(times) == 3


def test_exhausted_retries_fail_the_run_with_the_activity_error(storage_factory: Opener) -> None:
    """Uncaught, an exhausted activity fails the run; the error names the activity and cause."""

    def uncaught(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("work", retry=RetryPolicy(max_attempts=2, initial_backoff=1)))

    te = make_engine(
        storage_factory, {"uncaught": workflow("uncaught").activities(work=_noop).execute(uncaught)}
    )
    te.mock("work", raises=Flaky("nope"))
    handle = te.start("uncaught", id="u")
    te.advance(1)
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    assert info.value.error_type == "ActivityFailedError"
    assert "'work'" in info.value.error_message
    assert "2 attempt(s)" in info.value.error_message
    assert "Flaky: nope" in info.value.error_message
    assert te.mocks["work"].call_count == 2


@pytest.mark.parametrize(
    ("non_retryable", "raised"),
    [
        ((Fatal,), Fatal("bad input")),
        (("Fatal",), Fatal("bad input")),
        ((Fatal,), FatalChild("bad input")),
        (("Fatal",), FatalChild("bad input")),
        (("ValueError",), ValueError("bad input")),
    ],
    ids=["class", "name", "subclass-by-class", "subclass-by-mro-name", "builtin-name"],
)
def test_non_retryable_error_stops_at_the_first_attempt(
    storage_factory: Opener, non_retryable: tuple[Any, ...], raised: Exception
) -> None:
    """A match by class, name or MRO name fails at once: one call, no retry timer."""
    policy = RetryPolicy(max_attempts=5, non_retryable=non_retryable)
    te = make_engine(storage_factory, retrying(policy))
    times = _failing_times(te, 99, raised)
    handle = te.start("retrying", id="r")
    assert handle.result() == {
        "failed": type(raised).__name__,
        "message": "bad input",
        "attempts": 1,
    }
    assert stored_timers(te.storage) == []
    te.advance(3600)
    assert len(times) == 1


def test_other_errors_still_retry_under_a_non_retryable_list(storage_factory: Opener) -> None:
    """Errors not on the non-retryable list keep the normal retry schedule."""
    policy = RetryPolicy(max_attempts=3, initial_backoff=5, non_retryable=(Fatal, "KeyError"))
    te = make_engine(storage_factory, retrying(policy))
    times = _failing_times(te, 1, Flaky("blip"))
    handle = te.start("retrying", id="r")
    advance_to(te, T0 + 5)
    assert times == [T0, T0 + 5]
    assert handle.result() == {"value": "ok"}


def test_retry_state_survives_a_crash(storage_factory: Opener) -> None:
    """After a crash between attempts, the next attempt keeps its due time and count (the
    third attempt is the last one: its failure reaches the workflow)."""
    policy = RetryPolicy(max_attempts=3, initial_backoff=4, backoff_multiplier=2)
    te = make_engine(storage_factory, retrying(policy))
    times = _failing_times(te, 3, Flaky("down"))
    te.start("retrying", id="r")
    advance_to(te, T0 + 1)
    te.crash()
    te.recover(storage=storage_factory())
    advance_to(te, T0 + 4 - 0.001)
    assert times == [T0]
    advance_to(te, T0 + 4)
    te.crash()
    te.recover(storage=storage_factory())
    advance_to(te, T0 + 12 - 0.001)
    assert times == [T0, T0 + 4]
    advance_to(te, T0 + 12)
    assert times == [T0, T0 + 4, T0 + 12]
    handle = te.get_handle("r")
    assert handle.result() == {"failed": "Flaky", "message": "down", "attempts": 3}


def _timed(ctx: Any, _: Any) -> Any:
    policy = RetryPolicy(max_attempts=2, initial_backoff=3)
    # 1 s of real time: long enough that an attempt which returns at once never runs past it
    # on a busy machine (at 50 ms the second attempt timed out there too), short for the first
    return (yield ctx.run("work", retry=policy, timeout="1s"))


def test_per_attempt_timeout_fails_that_attempt_and_retries(storage_factory: Opener) -> None:
    """A sync attempt over its timeout fails (ActivityTimeoutError) and is retried."""
    te = make_engine(
        storage_factory, {"timed": workflow("timed").activities(work=_noop).execute(_timed)}
    )
    release = threading.Event()
    calls: list[float] = []

    def work(_: Any) -> str:
        calls.append(te.clock())
        if len(calls) == 1:
            release.wait(10)  # held past the 1 s timeout; released at the end of the test
            return "too late"
        return "on time"

    te.mock("work", impl=work)
    try:
        handle = te.start("timed", id="t")
        assert len(calls) == 1
        assert te.describe("t").status == "running"
        advance_to(te, T0 + 3 - 0.001)
        assert len(calls) == 1
        advance_to(te, T0 + 3)
        assert handle.result() == "on time"
        assert calls == [T0, T0 + 3]
    finally:
        release.set()


def test_timeout_on_every_attempt_fails_with_activity_timeout(storage_factory: Opener) -> None:
    """An async activity that never finishes fails with ActivityTimeoutError after its attempts."""

    async def hang(_: Any) -> None:
        await asyncio.Event().wait()

    def timed(ctx: Any, _: Any) -> Any:
        policy = RetryPolicy(max_attempts=2, initial_backoff=1)
        return (yield ctx.run("hang", retry=policy, timeout=0.02))

    te = make_engine(
        storage_factory, {"timed": workflow("timed").activities(hang=hang).execute(timed)}
    )
    handle = te.start("timed", id="t")
    te.advance(1)
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    # The step's failure is an ActivityFailedError that is also an ActivityTimeoutError.
    assert info.value.error_type == "ActivityTimedOutError"
    assert "ActivityTimeoutError" in info.value.error_message
    assert "2 attempt(s)" in info.value.error_message


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"initial_backoff": -1},
        {"max_backoff": -1},
        {"backoff_multiplier": 0.5},
    ],
)
def test_invalid_retry_policy_is_rejected(options: dict[str, Any]) -> None:
    """A policy that cannot be followed is refused when built, with a stable code."""
    with pytest.raises(InvalidArgumentError) as info:
        RetryPolicy(**options)
    assert info.value.code == "InvalidArgumentError"


def test_retry_backoff_is_capped() -> None:
    """``backoff(n)`` grows by the multiplier and never passes ``max_backoff``."""
    policy = RetryPolicy(initial_backoff=1, backoff_multiplier=2, max_backoff=5)
    assert [policy.backoff(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


# -- exactly-due timers ------------------------------------------------------------------------


def _retries_once(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("flaky", None, retry=RetryPolicy(max_attempts=2, initial_backoff=0.4)))


@pytest.mark.parametrize("start", [T0, T0 + 0.123, 1_234_567.891])
def test_advancing_by_exactly_the_backoff_fires_the_retry(
    storage_factory: Opener, start: float
) -> None:
    """A 0.4 s backoff retries on ``advance(0.4)``, not only on 0.401, from any start time."""
    flaky = {"flaky": workflow("flaky").activities(flaky=_noop).execute(_retries_once)}
    te = TestEngine(flaky, storage=storage_factory(), clock=VirtualClock(start))
    outcomes = iter([RuntimeError("first"), "ok"])

    def impl(_: Any) -> Any:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    mock = te.mock("flaky", impl=impl)
    handle = te.start("flaky", id="f")
    te.advance(0.399)
    assert len(mock.calls) == 1
    te.advance(0.001)
    assert len(mock.calls) == 2
    assert handle.result() == "ok"


@pytest.mark.parametrize("seconds", [0.4, 0.1, 0.3, 1.7, 2.675])
def test_advancing_by_exactly_the_sleep_fires_it(storage_factory: Opener, seconds: float) -> None:
    """``advance(d)`` after ``sleep(d)`` wakes the sleeper, for durations float cannot hold."""
    te = TestEngine(SLEEPER, storage=storage_factory(), clock=VirtualClock(T0 + 0.7))
    te.mock("tick", impl=lambda label: label)
    handle = te.start("sleeper", seconds, id="s")
    te.advance(seconds)
    assert handle.result() == ["before", "after"]


def _flaky_twice(calls: list[int]) -> Any:
    def flaky(_: Any) -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError(f"timeout #{len(calls)}")
        return "paid"

    return flaky


def test_a_retry_with_no_backoff_runs_at_once_even_mid_millisecond() -> None:
    """A zero backoff is due at once: the run does not park until the next whole millisecond
    (due times round up to the millisecond for timers, not for the step's own check)."""
    calls: list[int] = []

    def flow(ctx: Any, _: Any) -> Any:
        policy = RetryPolicy(max_attempts=5, initial_backoff=0)
        return (yield ctx.run("flaky", None, retry=policy))

    te = TestEngine(
        {"f": workflow("f").activities(flaky=_flaky_twice(calls)).execute(flow)},
        clock=VirtualClock(1_767_225_600.0004),
    )
    handle = te.start("f", id="f")
    assert te.describe("f").status == "completed"
    assert handle.result() == "paid"
    assert len(calls) == 3
