"""Sagas: compensations of completed steps run durably, newest first, then the error is raised.

Rules pinned here: ``saga.execute(body)`` (and ``yield from saga.compensate()`` followed by a
``raise``) runs the compensation of every step that completed, in reverse order, each as a
durable step with the step's result (or the given input), and then re-raises the original
error, so the run fails with it; a failed step is not compensated, and nothing is compensated
when nothing fails. A crash in the middle of compensating resumes compensating: no compensation
runs twice except the one whose write the crash cut.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_op,
    recover_fresh,
)

from weft_serverless import RetryPolicy, Saga, UnknownActivityError, WorkflowDefinition, workflow
from weft_serverless.testing import SimulatedCrash

WF = "wf-trip"
ONCE = RetryPolicy(max_attempts=1)


class Travel:
    """Bookings that can fail (``fail``) or kill the process (``crash_in``) on demand."""

    def __init__(self, *, fail: str = "car", crash_in: str | None = None) -> None:
        self.calls = Calls()
        self.fail = fail
        self.crash_in = crash_in

    def act(self, name: str) -> Any:
        record = self.calls.fn(name, lambda arg: f"{name}-ok" if arg is None else f"{name}:{arg}")

        def run(arg: Any = None) -> Any:
            value = record(arg)
            if name == self.crash_in:
                self.crash_in = None
                raise SimulatedCrash(f"process died in {name}")
            if name == self.fail:
                raise RuntimeError(f"{name} unavailable")
            return value

        run.__name__ = name
        return run

    def activities(self) -> dict[str, Any]:
        names = ("flight", "hotel", "car", "cancel_flight", "cancel_hotel", "cancel_car")
        return {name: self.act(name) for name in names}

    def undo_log(self) -> list[tuple[str, Any]]:
        return [entry for entry in self.calls.log if entry[0].startswith("cancel_")]


def _book(saga: Saga) -> Generator[Any, Any, Any]:
    flight = yield from saga.run("flight", None, compensate="cancel_flight", retry=ONCE)
    hotel = yield from saga.run(
        "hotel", None, compensate="cancel_hotel", compensate_input="by-name", retry=ONCE
    )
    car = yield from saga.run("car", None, compensate="cancel_car", retry=ONCE)
    return [flight, hotel, car]


def _trip(ctx: Any, _: Any) -> Any:
    return (yield from ctx.saga().execute(_book))


def _manual_trip(ctx: Any, _: Any) -> Any:
    saga = ctx.saga()
    try:
        yield ctx.run("flight", retry=ONCE)
        saga.add_compensation("cancel_flight", "manual")
        yield ctx.run("hotel", retry=ONCE)
        saga.add_compensation("cancel_hotel")
        yield ctx.run("car", retry=ONCE)
    except Exception:
        yield from saga.compensate()
        raise
    return "booked"


def _workflows(travel: Travel) -> dict[str, WorkflowDefinition]:
    acts = travel.activities()
    return {
        "trip": workflow("trip").activities(**acts).execute(_trip),
        "manual": workflow("manual").activities(**acts).execute(_manual_trip),
    }


def _failed_with(te: Any, error_type: str) -> None:
    description = te.describe(WF)
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == error_type


def test_compensations_run_in_reverse_then_the_error_is_raised(storage_factory: Opener) -> None:
    """``execute``: the car fails; hotel then flight are undone (each with its input: the given
    one, or the step's result); the run fails with the car's error."""
    travel = Travel(fail="car")
    te = make_engine(storage_factory, _workflows(travel))
    te.start("trip", id=WF)
    assert travel.undo_log() == [("cancel_hotel", "by-name"), ("cancel_flight", "flight-ok")]
    assert travel.calls.count("cancel_car") == 0
    _failed_with(te, "ActivityFailedError")
    assert "car unavailable" in str(te.describe(WF).error)


def test_compensate_then_raise_by_hand(storage_factory: Opener) -> None:
    """``compensate()`` followed by ``raise`` gives the same order and outcome."""
    travel = Travel(fail="car")
    te = make_engine(storage_factory, _workflows(travel))
    te.start("manual", id=WF)
    assert travel.undo_log() == [("cancel_hotel", None), ("cancel_flight", "manual")]
    _failed_with(te, "ActivityFailedError")


def test_nothing_is_compensated_without_a_failure(storage_factory: Opener) -> None:
    """A saga whose steps all succeed returns their results and undoes nothing."""
    travel = Travel(fail="none")
    te = make_engine(storage_factory, _workflows(travel))
    te.start("trip", id=WF)
    assert te.describe(WF).result == ["flight-ok", "hotel-ok", "car-ok"]
    assert travel.undo_log() == []


def test_an_early_failure_compensates_only_what_completed(storage_factory: Opener) -> None:
    """The hotel fails: only the flight is undone."""
    travel = Travel(fail="hotel")
    te = make_engine(storage_factory, _workflows(travel))
    te.start("trip", id=WF)
    assert travel.undo_log() == [("cancel_flight", "flight-ok")]
    _failed_with(te, "ActivityFailedError")


def test_crash_after_a_compensation_commits_resumes_compensating(
    storage_factory: Opener,
) -> None:
    """Crash right after the first compensation (hotel) is committed: the fresh engine undoes
    only the flight, then fails the run with the original error."""
    travel = Travel(fail="car")
    te, crashing = crashable_engine(storage_factory, _workflows(travel))
    crashing.arm(puts_op(WF, 3), after=True)  # steps: flight, hotel, car, cancel_hotel
    with expect_crash():
        te.start("trip", id=WF)
    assert travel.undo_log() == [("cancel_hotel", "by-name")]
    recover_fresh(te, storage_factory)
    assert travel.undo_log() == [("cancel_hotel", "by-name"), ("cancel_flight", "flight-ok")]
    _failed_with(te, "ActivityFailedError")


@pytest.mark.parametrize("crash_in", ["cancel_hotel", "cancel_flight"])
def test_crash_inside_a_compensation_reruns_only_that_one(
    storage_factory: Opener, crash_in: str
) -> None:
    """The process dies while a compensation runs (its write never happens): after recovery
    that compensation runs again, every other runs exactly once, in reverse order."""
    travel = Travel(fail="car", crash_in=crash_in)
    te = make_engine(storage_factory, _workflows(travel))
    with expect_crash():
        te.start("trip", id=WF)
    recover_fresh(te, storage_factory)
    undone = [name for name, _ in travel.undo_log()]
    expected = ["cancel_hotel", "cancel_flight"]
    cut = expected.index(crash_in)
    assert undone == expected[: cut + 1] + expected[cut:]
    assert travel.calls.count("car") == 1
    _failed_with(te, "ActivityFailedError")


def test_a_failing_compensation_does_not_stop_the_others(storage_factory: Opener) -> None:
    """A compensation that fails for good (after its retries) is skipped: the older ones
    still run, and the run fails with the original error (Weft swallows compensation errors)."""
    travel = Travel(fail="car")
    acts = travel.activities()

    def broken_undo(arg: Any = None) -> None:
        travel.calls.log.append(("cancel_hotel", arg))
        raise RuntimeError("hotel system down")

    acts["cancel_hotel"] = broken_undo

    def book(saga: Saga) -> Generator[Any, Any, Any]:
        yield from saga.run("flight", None, compensate="cancel_flight", retry=ONCE)
        yield from saga.run("hotel", None, compensate="cancel_hotel", retry=ONCE)
        yield from saga.run("car", None, compensate="cancel_car", retry=ONCE)

    def body(ctx: Any, _: Any) -> Any:
        return (yield from ctx.saga().execute(book))

    te = make_engine(storage_factory, {"trip": workflow("trip").activities(**acts).execute(body)})
    te.start("trip", id=WF)
    for _ in range(3):
        te.advance(30)  # let the failing compensation use up its retries
    assert travel.calls.count("cancel_hotel") == 3
    assert ("cancel_flight", "flight-ok") in travel.undo_log()
    description = te.describe(WF)
    assert description.status == "failed"
    assert "car unavailable" in str(description.error)


def test_undeclared_compensation_fails_before_the_step_runs(storage_factory: Opener) -> None:
    """A compensation that is not a declared activity fails at the ``saga.run`` call, before
    its step runs (``UnknownActivityError``)."""
    travel = Travel(fail="none")

    def body(ctx: Any, _: Any) -> Any:
        saga = ctx.saga()
        return (yield from saga.run("flight", compensate="refund_everything"))

    te = make_engine(
        storage_factory, {"bad": workflow("bad").activities(**travel.activities()).execute(body)}
    )
    te.start("bad", id=WF)
    _failed_with(te, UnknownActivityError.__name__)
    assert travel.calls.log == []
