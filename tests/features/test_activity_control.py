"""Heartbeats, cancellation of running attempts, heartbeat_timeout and schedule_to_close.

Time limits are measured on the engine's (virtual) clock: an activity that must outlive one
moves the virtual clock itself, then waits on its cancel event, which the engine sets when it
gives the attempt up. Nothing here sleeps to wait for a timer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from feature_support import Opener, make_engine

from weft_serverless import (
    ActivityFailedError,
    ActivityTimedOutError,
    ActivityTimeoutError,
    CodecError,
    InvalidArgumentError,
    PayloadTooLargeError,
    RetryPolicy,
    WorkflowCancelledError,
    WorkflowFailedError,
    current_activity,
    workflow,
)
from weft_serverless.activity import MAX_HEARTBEAT_BYTES
from weft_serverless.codec import decode
from weft_serverless.engine.inspection import inspect_workflow, read_owner
from weft_serverless.engine.persistence.outcomes import error_from_record
from weft_serverless.engine.steps.heartbeats import STORE_EVERY
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

WAIT = 20.0  # only a broken engine makes a test wait this long


def _in_thread(call: Callable[[], Any]) -> threading.Thread:
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    return worker


# -- cancellation ----------------------------------------------------------------------------


def test_cancel_stops_a_heartbeating_sync_activity(storage_factory: Opener) -> None:
    started, seen = threading.Event(), threading.Event()
    beats: list[int] = []

    def export(_: Any) -> str:
        act = current_activity()
        page = 0
        while not act.cancelled:
            act.heartbeat(page)
            beats.append(page)
            page += 1
            started.set()
            act.cancel_event.wait(0.01)
        seen.set()
        return "finished anyway"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export"))

    flows = {"x": workflow("x").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows)
    driving = _in_thread(lambda: te.start("x", id="x"))
    assert started.wait(WAIT)
    te.cancel("x")
    assert seen.wait(WAIT)
    driving.join(WAIT)
    assert not driving.is_alive()
    with pytest.raises(WorkflowCancelledError):
        te.get_handle("x").result()
    assert te.storage.get(keys.op_key("x", keys.step_slot(0))) is None  # its result is void


def test_cancel_cancels_an_async_activity(storage_factory: Opener) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def poll(_: Any) -> str:
        started.set()
        try:
            while True:
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("poll"))

    flows = {"x": workflow("x").activities(poll=poll).execute(body)}
    te = make_engine(storage_factory, flows)
    driving = _in_thread(lambda: te.start("x", id="x"))
    assert started.wait(WAIT)
    te.cancel("x")
    assert cancelled.wait(WAIT)
    driving.join(WAIT)
    assert not driving.is_alive()
    assert te.describe("x").status == "cancelled"


def test_a_cancel_made_on_another_engine_is_noticed_at_the_next_heartbeat(
    storage_factory: Opener,
) -> None:
    started, noticed = threading.Event(), threading.Event()
    go_on = threading.Event()
    box: list[TestEngine] = []

    def export(_: Any) -> None:
        act = current_activity()
        act.heartbeat(0)
        started.set()
        go_on.wait(WAIT)
        box[0].clock.advance(STORE_EVERY)  # the next heartbeat is stored, and reads the run
        act.heartbeat(1)
        if act.cancelled:
            noticed.set()

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export"))

    flows = {"x": workflow("x").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows)
    box.append(te)
    other = make_engine(storage_factory, flows)
    driving = _in_thread(lambda: te.start("x", id="x"))
    assert started.wait(WAIT)
    other.cancel("x")  # the engine running the attempt is not told
    go_on.set()
    assert noticed.wait(WAIT)
    driving.join(WAIT)
    assert te.storage.get(keys.op_key("x", keys.step_slot(0))) is None


def test_the_attempt_timeout_sets_the_cancel_event(storage_factory: Opener) -> None:
    told: list[bool] = []
    box: list[TestEngine] = []
    answered = threading.Event()

    def hang(_: Any) -> None:
        box[0].clock.advance(11)
        told.append(current_activity().cancel_event.wait(WAIT))
        answered.set()

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("hang", timeout="10s", retry=RetryPolicy(max_attempts=1)))

    flows = {"t": workflow("t").activities(hang=hang).execute(body)}
    te = make_engine(storage_factory, flows)
    box.append(te)
    with pytest.raises(WorkflowFailedError) as info:
        te.start("t", id="t").result()
    assert info.value.error_type == "ActivityTimedOutError"
    assert answered.wait(WAIT)
    assert told == [True]


def test_the_invocation_deadline_gives_the_attempt_up_for_the_next_one(
    storage_factory: Opener,
) -> None:
    left = [60.0]
    attempts: list[int] = []

    def long(_: Any) -> str:
        act = current_activity()
        attempts.append(act.attempt)
        if len(attempts) == 1:
            left[0] = 0.5  # the invocation nears its end while the attempt runs
            assert act.cancel_event.wait(WAIT)
            return "too late"
        return "done"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("long"))

    flows = {"l": workflow("l").activities(long=long).execute(body)}
    te = make_engine(storage_factory, flows)
    with te.engine.invocation(time_left=lambda: left[0]):
        te.start("l", id="l")
    assert te.describe("l").status == "running"
    te.advance(0)  # the next invocation (a maintenance pass) runs the same attempt again
    assert te.get_handle("l").result() == "done"
    assert attempts == [1, 1]


# -- heartbeats and heartbeat_timeout ----------------------------------------------------------


def test_heartbeat_timeout_retries_and_the_next_attempt_reads_the_details(
    storage_factory: Opener,
) -> None:
    box: list[TestEngine] = []
    seen: list[tuple[int, Any]] = []

    def export(_: Any) -> str:
        act = current_activity()
        seen.append((act.attempt, act.heartbeat_details))
        if act.attempt == 1:
            act.heartbeat({"page": 3})
            box[0].clock.advance(31)  # then goes silent past heartbeat_timeout
            act.cancel_event.wait(WAIT)
            return "void"
        return f"resumed at {act.heartbeat_details['page']}"

    def body(ctx: Any, _: Any) -> Any:
        policy = RetryPolicy(max_attempts=3, initial_backoff=5)
        return (yield ctx.run("export", heartbeat_timeout="30s", retry=policy))

    flows = {"e": workflow("e").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows)
    box.append(te)
    te.start("e", id="e")
    attempts = te.describe("e", attempts=True).failed_attempts
    assert [(a["attempt"], a["error_type"]) for a in attempts] == [(1, "ActivityTimeoutError")]
    assert "heartbeat" in attempts[0]["message"]
    te.advance(5)
    assert te.get_handle("e").result() == "resumed at 3"
    assert seen == [(1, None), (2, {"page": 3})]


def test_heartbeats_show_in_weft_show_while_the_attempt_runs(storage_factory: Opener) -> None:
    beat, release = threading.Event(), threading.Event()

    def export(_: Any) -> str:
        current_activity().heartbeat({"page": 7})
        beat.set()
        release.wait(WAIT)
        return "ok"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export", heartbeat_timeout="1h"))

    flows = {"e": workflow("e").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows)
    driving = _in_thread(lambda: te.start("e", id="e"))
    assert beat.wait(WAIT)
    steps = inspect_workflow(te.engine, "e").history.steps
    assert [(s.status, s.heartbeat and s.heartbeat["details"]) for s in steps] == [
        ("running", {"page": 7})
    ]
    assert steps[0].as_json()["heartbeat"]["details"] == {"page": 7}  # weft show --json
    release.set()
    driving.join(WAIT)
    assert te.get_handle("e").result() == "ok"
    # The step's end removes its heartbeat record.
    assert te.storage.get(keys.heartbeat_key("e", keys.step_slot(0))) is None


def test_a_crash_keeps_the_stored_heartbeat_for_the_next_attempt(storage_factory: Opener) -> None:
    beat, release = threading.Event(), threading.Event()
    seen: list[Any] = []

    def export(_: Any) -> str:
        act = current_activity()
        seen.append(act.heartbeat_details)
        if len(seen) == 1:
            act.heartbeat("cursor-42")
            beat.set()
            release.wait(WAIT)  # the process dies here
            return "void"
        return "ok"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export", heartbeat_timeout="1h"))

    flows = {"e": workflow("e").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows)
    first = te.engine
    driving = _in_thread(lambda: te.start("e", id="e"))
    assert beat.wait(WAIT)
    te.crash()
    te.recover(storage_factory())
    te.advance(60)  # past the wake-up grace: another process drives the run
    assert te.get_handle("e").result() == "ok"
    assert seen == [None, "cursor-42"]
    release.set()  # the "dead" process's attempt ends: its result lands nowhere
    driving.join(WAIT)
    assert te.get_handle("e").result() == "ok"
    first.close()


def test_heartbeat_details_that_cannot_be_stored_are_typed_errors(
    storage_factory: Opener,
) -> None:
    def export(_: Any) -> list[str]:
        act = current_activity()
        codes = []
        for bad in (object(), "x" * (MAX_HEARTBEAT_BYTES + 1)):
            try:
                act.heartbeat(bad)
            except (CodecError, PayloadTooLargeError) as exc:
                codes.append(exc.code)
        return codes

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export"))

    flows = {"e": workflow("e").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("e", id="e").result() == ["CodecError", "PayloadTooLargeError"]
    assert te.storage.get(keys.heartbeat_key("e", keys.step_slot(0))) is None


# -- schedule_to_close -------------------------------------------------------------------------


def _failing_flow(calls: list[float], te_box: list[TestEngine], s2c: str) -> Any:
    def flaky(_: Any) -> None:
        calls.append(te_box[0].clock())
        raise ValueError("down")

    def body(ctx: Any, _: Any) -> Any:
        policy = RetryPolicy(max_attempts=5, initial_backoff=10, backoff_multiplier=2)
        try:
            yield ctx.run("flaky", retry=policy, schedule_to_close=s2c)
        except ActivityTimeoutError as exc:
            assert isinstance(exc, ActivityFailedError)
            return [type(exc).__name__, exc.kind, exc.attempts]
        return "no"

    return {"s": workflow("s").activities(flaky=flaky).execute(body)}


def test_schedule_to_close_smaller_than_the_next_backoff_starts_no_more_attempt(
    storage_factory: Opener,
) -> None:
    calls: list[float] = []
    box: list[TestEngine] = []
    te = make_engine(storage_factory, _failing_flow(calls, box, "5s"))
    box.append(te)
    handle = te.start("s", id="s")
    assert handle.result() == ["ActivityTimedOutError", "schedule_to_close", 1]
    te.advance(100)
    assert len(calls) == 1


def test_schedule_to_close_lets_the_retries_that_fit(storage_factory: Opener) -> None:
    calls: list[float] = []
    box: list[TestEngine] = []
    te = make_engine(storage_factory, _failing_flow(calls, box, "15s"))
    box.append(te)
    handle = te.start("s", id="s")
    te.advance(10)  # attempt 2 at +10 fits in 15 s; attempt 3 would start at +30
    assert handle.result() == ["ActivityTimedOutError", "schedule_to_close", 2]
    te.advance(100)
    assert [c - calls[0] for c in calls] == [0.0, 10.0]


def test_schedule_to_close_passing_mid_attempt_fails_without_retry(
    storage_factory: Opener,
) -> None:
    box: list[TestEngine] = []
    attempts: list[int] = []

    def hang(_: Any) -> None:
        attempts.append(current_activity().attempt)
        box[0].clock.advance(61)
        current_activity().cancel_event.wait(WAIT)

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("hang", schedule_to_close="1m", retry=RetryPolicy(max_attempts=5)))

    flows = {"h": workflow("h").activities(hang=hang).execute(body)}
    te = make_engine(storage_factory, flows)
    box.append(te)
    with pytest.raises(WorkflowFailedError) as info:
        te.start("h", id="h").result()
    assert info.value.error_type == "ActivityTimedOutError"
    assert "schedule_to_close" in info.value.error_message
    assert attempts == [1]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("heartbeat_timeout", 0),
        ("heartbeat_timeout", "-1s"),
        ("heartbeat_timeout", "soon"),
        ("schedule_to_close", 0),
        ("schedule_to_close", "0s"),
        ("schedule_to_close", float("nan")),
        ("schedule_to_close", [1]),
    ],
)
def test_bad_time_limits_are_typed_errors_at_the_call(
    storage_factory: Opener, option: str, value: Any
) -> None:
    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.run("work", **{option: value})
        except InvalidArgumentError as exc:
            return [exc.code, exc.field]
        return "accepted"

    flows = {"b": workflow("b").activities(work=lambda: None).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("b", id="b").result() == ["InvalidArgumentError", option]
    stored = [sort for sort, _ in te.storage.scan(keys.workflow_partition("b"), keys.OP_PREFIX)]
    assert stored == []


def test_the_step_error_records_the_timeout_kind_for_replay(storage_factory: Opener) -> None:
    calls: list[float] = []
    box: list[TestEngine] = []
    te = make_engine(storage_factory, _failing_flow(calls, box, "5s"))
    box.append(te)
    te.start("s", id="s").result()
    record = decode(te.storage.get(keys.op_key("s", keys.step_slot(0))) or b"")
    assert record["err"]["timeout"] == "schedule_to_close"
    replayed = error_from_record(record["err"])  # what a replay raises at the yield
    assert isinstance(replayed, ActivityTimedOutError)
    assert (replayed.kind, replayed.attempts) == ("schedule_to_close", 1)


# -- under workflow-lease ----------------------------------------------------------------------


def test_heartbeats_renew_the_claim_under_workflow_lease(storage_factory: Opener) -> None:
    box: list[TestEngine] = []
    expiries: list[float] = []

    def export(_: Any) -> str:
        act = current_activity()
        for page in range(4):
            box[0].clock.advance(20)  # 80 s in all: well past the 30 s claim
            act.heartbeat(page)
            owner = read_owner(box[0].storage, "w")
            assert owner is not None and owner.holder is not None
            expiries.append(owner.holder.expires_at - box[0].clock())
        return "ok"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export"))

    flows = {"w": workflow("w").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows, ownership="workflow-lease")
    box.append(te)
    assert te.start("w", id="w").result() == "ok"
    assert all(left > 0 for left in expiries)  # never let lapse while the activity ran


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_a_cancel_elsewhere_voids_the_result_under_each_mode(
    storage_factory: Opener, ownership: str
) -> None:
    started, go_on, noticed = threading.Event(), threading.Event(), threading.Event()
    box: list[TestEngine] = []

    def export(_: Any) -> str:
        act = current_activity()
        act.heartbeat(0)
        started.set()
        go_on.wait(WAIT)
        box[0].clock.advance(STORE_EVERY)
        act.heartbeat(1)
        if act.cancelled:
            noticed.set()
        return "late"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("export"))

    flows = {"x": workflow("x").activities(export=export).execute(body)}
    te = make_engine(storage_factory, flows, ownership=ownership)
    box.append(te)
    other = make_engine(storage_factory, flows, ownership=ownership)
    driving = _in_thread(lambda: te.start("x", id="x"))
    assert started.wait(WAIT)
    other.cancel("x")
    go_on.set()
    assert noticed.wait(WAIT)
    driving.join(WAIT)
    assert te.storage.get(keys.op_key("x", keys.step_slot(0))) is None
    assert other.describe("x").status == "cancelled"
