"""Finalizers (``ctx.on_cancel``): registered durably, run at least once after a run ends
cancelled or timed out (or failed, with ``on_failure``), in reverse registration order,
retried, dead-lettered, never after completion; on every backend, virtual time."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    expect_crash,
    make_engine,
    recover_fresh,
    sorts_with,
)

from weft_serverless import (
    CodecError,
    InvalidArgumentError,
    PayloadTooLargeError,
    RetryPolicy,
    TeardownPendingError,
    UnknownActivityError,
    WeftError,
    WorkflowContext,
    workflow,
)
from weft_serverless.engine.teardown import CLAIM_TTL
from weft_serverless.storage import keys
from weft_serverless.storage.base import Op, Put, Storage
from weft_serverless.testing import CrashingStorage, TestEngine

Gen = Generator[Any, Any, Any]
NO_RETRY = RetryPolicy(max_attempts=1)


def _flow(ctx: WorkflowContext, order: int) -> Gen:
    """Registers two finalizers around a step, then waits an hour."""
    ctx.on_cancel("release_hold", {"order": order})
    yield ctx.run("reserve", order)
    ctx.on_cancel("refund", order)
    yield ctx.sleep("1h")
    return "shipped"


def _workflows(calls: Calls, **activities: Any) -> dict[str, Any]:
    acts = {
        "reserve": calls.fn("reserve"),
        "release_hold": calls.fn("release_hold"),
        "refund": calls.fn("refund"),
        **activities,
    }
    return {"order": workflow("order").activities(**acts).execute(_flow)}


def _finalizer_calls(calls: Calls) -> list[tuple[str, Any]]:
    return [call for call in calls.log if call[0] != "reserve"]


def test_a_cancel_runs_each_finalizer_once_in_reverse_order(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _workflows(calls))
    te.start("order", 7, id="o")
    assert len(sorts_with(te.storage, "o", keys.FINALIZER_PREFIX)) == 2
    te.cancel("o")
    assert _finalizer_calls(calls) == [("refund", 7), ("release_hold", {"order": 7})]
    teardown = te.describe("o").teardown
    assert teardown is not None and teardown["status"] == "completed"
    assert teardown["reason"] == "cancelled"
    assert [(f["activity"], f["state"], f["attempts"]) for f in teardown["finalizers"]] == [
        ("refund", "done", 1),
        ("release_hold", "done", 1),
    ]
    te.advance(2 * 3600)  # later passes find nothing left to run
    assert len(_finalizer_calls(calls)) == 2


def test_an_execution_timeout_runs_the_finalizers(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _workflows(calls))
    te.start("order", 3, id="o", execution_timeout="10m")
    te.advance(601)
    assert te.describe("o").status == "timed-out"
    assert _finalizer_calls(calls) == [("refund", 3), ("release_hold", {"order": 3})]
    teardown = te.describe("o").teardown
    assert teardown is not None and teardown["reason"] == "timed-out"
    assert teardown["status"] == "completed"


def test_a_completed_run_never_runs_its_finalizers(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _workflows(calls))
    te.start("order", 1, id="o")
    te.advance(3601)
    assert te.describe("o").status == "completed"
    te.advance(3600)
    assert _finalizer_calls(calls) == []
    assert te.describe("o").teardown is None
    assert te.storage.get(keys.teardown_key("o")) is None


def _boom(_: Any) -> None:
    raise RuntimeError("broken")


@pytest.mark.parametrize("with_on_failure", [True, False])
def test_a_failed_run_runs_only_its_on_failure_finalizers(
    storage_factory: Opener, with_on_failure: bool
) -> None:
    calls = Calls()

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        if with_on_failure:
            ctx.on_cancel("cleanup", "on-failure", on_failure=True)
        ctx.on_cancel("undo", "cancel-only")
        yield ctx.run("boom", None, retry=NO_RETRY)

    wf = workflow("f").activities(cleanup=calls.fn("cleanup"), undo=calls.fn("undo"), boom=_boom)
    te = make_engine(storage_factory, {"f": wf.execute(flow)})
    te.start("f", None, id="f")
    te.advance(1)
    assert te.describe("f").status == "failed"
    if with_on_failure:
        assert calls.log == [("cleanup", "on-failure")]
        teardown = te.describe("f").teardown
        assert teardown is not None and teardown["reason"] == "failed"
    else:
        assert calls.log == []
        assert te.describe("f").teardown is None


def _always_down(_: Any) -> None:
    raise RuntimeError("hold service down")


def test_retries_back_off_then_dead_letter_which_survives_purge(storage_factory: Opener) -> None:
    calls = Calls()

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        ctx.on_cancel("refund", "r")
        retry = RetryPolicy(max_attempts=3, initial_backoff=10, backoff_multiplier=2)
        ctx.on_cancel("release_hold", {"order": 9}, retry=retry)
        yield ctx.sleep("1h")

    down = Calls()
    wf = workflow("d").activities(
        refund=calls.fn("refund"), release_hold=down.fn("release_hold", _always_down)
    )
    te = make_engine(storage_factory, {"d": wf.execute(flow)})
    te.start("d", None, id="d")
    te.cancel("d")
    assert len(down.log) == 1 and calls.log == []  # attempt 1 failed; backoff 10 s
    teardown = te.describe("d").teardown
    assert teardown is not None and teardown["status"] == "pending"
    first = teardown["finalizers"][0]
    assert (first["activity"], first["attempts"]) == ("release_hold", 1)
    assert first["last_error"] == {"type": "RuntimeError", "message": "hold service down"}
    with pytest.raises(TeardownPendingError):
        te.purge("d")  # purge waits for the teardown
    te.advance(9)
    assert len(down.log) == 1
    te.advance(1)
    assert len(down.log) == 2  # attempt 2; backoff 20 s
    te.advance(19)
    assert len(down.log) == 2 and calls.log == []
    te.advance(1)  # attempt 3 fails: dead letter, then the next finalizer runs
    assert len(down.log) == 3
    assert calls.log == [("refund", "r")]
    teardown = te.describe("d").teardown
    assert teardown is not None and teardown["status"] == "completed"
    assert [f["state"] for f in teardown["finalizers"]] == ["dead-lettered", "done"]
    letters = te.list_dead_letters()
    assert len(letters) == 1
    letter = letters[0]
    assert (letter["workflow_id"], letter["activity"], letter["attempts"]) == (
        "d",
        "release_hold",
        3,
    )
    assert letter["input"] == {"order": 9} and letter["reason"] == "cancelled"
    assert letter["error"]["message"] == "hold service down"
    te.purge("d")
    assert te.list_dead_letters("d") == letters  # outlives the run
    te.advance(3600)
    assert len(down.log) == 3


def test_retention_waits_for_a_pending_teardown(storage_factory: Opener) -> None:
    down = Calls()

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        ctx.on_cancel("release_hold", 1, retry=RetryPolicy(max_attempts=2, initial_backoff=100))
        yield ctx.sleep("1h")

    wf = workflow("r").activities(release_hold=down.fn("release_hold", _always_down))
    te = make_engine(storage_factory, {"r": wf.execute(flow)}, retention={"cancelled": "10s"})
    te.start("r", None, id="r")
    te.cancel("r")
    te.advance(11)  # the window passed, but the teardown is pending
    assert te.describe("r").status == "cancelled"
    te.advance(90)  # attempt 2 at +100 s dead-letters; a later pass purges
    te.advance(1)
    assert len(down.log) == 2
    assert te.storage.get(keys.state_key("r")) is None
    assert len(te.list_dead_letters("r")) == 1


def test_retry_of_a_failed_run_waits_for_its_teardown(storage_factory: Opener) -> None:
    down = Calls()

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        ctx.on_cancel(
            "cleanup", 1, on_failure=True, retry=RetryPolicy(max_attempts=2, initial_backoff=60)
        )
        yield ctx.run("boom", None, retry=NO_RETRY)

    wf = workflow("f").activities(cleanup=down.fn("cleanup", _always_down), boom=_boom)
    te = make_engine(storage_factory, {"f": wf.execute(flow)})
    te.start("f", None, id="f")
    te.advance(1)
    assert te.describe("f").status == "failed" and len(down.log) == 1
    with pytest.raises(TeardownPendingError):
        te.retry("f")
    assert te.describe("f").status == "failed"
    te.advance(60)
    assert len(down.log) == 2
    te.retry("f")  # the teardown completed (dead-lettered): retry is allowed again


class _BadInput:
    pass


def test_bad_input_raises_at_the_call_and_stores_nothing(storage_factory: Opener) -> None:
    seen: list[str] = []

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        for call in (
            lambda: ctx.on_cancel("not_declared", 1),
            lambda: ctx.on_cancel("undo", _BadInput()),
            lambda: ctx.on_cancel("undo", "x" * 5000),
            lambda: ctx.on_cancel("undo", 1, retry={"max_attempts": 2}),  # type: ignore[arg-type]
            lambda: ctx.on_cancel("undo", 1, on_failure="yes"),  # type: ignore[arg-type]
        ):
            try:
                call()
            except WeftError as exc:
                seen.append(type(exc).__name__)
        yield ctx.sleep("1h")

    calls = Calls()
    wf = workflow("b").activities(undo=calls.fn("undo"))
    te = make_engine(storage_factory, {"b": wf.execute(flow)}, max_payload_bytes=4096)
    te.start("b", None, id="b")
    assert seen == [
        UnknownActivityError.__name__,
        CodecError.__name__,
        PayloadTooLargeError.__name__,
        InvalidArgumentError.__name__,
        InvalidArgumentError.__name__,
    ]
    assert sorts_with(te.storage, "b", keys.FINALIZER_PREFIX) == []
    te.cancel("b")
    assert calls.log == [] and te.describe("b").teardown is None


def test_replay_recognises_stored_registrations(storage_factory: Opener) -> None:
    """Every drive after a restart replays from the top: the registrations are checked
    against the stored ones, never written again; a changed finalizer fails the run."""
    calls = Calls()
    workflows = _workflows(calls)
    te = make_engine(storage_factory, workflows)
    te.start("order", 5, id="o")
    stored = list(te.storage.scan(keys.workflow_partition("o"), keys.FINALIZER_PREFIX))
    recover_fresh(te, storage_factory)
    te.recover_all()
    te.advance(60)
    assert list(te.storage.scan(keys.workflow_partition("o"), keys.FINALIZER_PREFIX)) == stored

    def changed(ctx: WorkflowContext, order: int) -> Gen:
        ctx.on_cancel("refund", order)  # position 1 stored "release_hold"
        yield ctx.run("reserve", order)
        yield ctx.sleep("1h")

    acts = {name: calls.fn(name) for name in ("reserve", "release_hold", "refund")}
    recover_fresh(
        te, storage_factory, {"order": workflow("order").activities(**acts).execute(changed)}
    )
    te.recover_all()
    description = te.describe("o")
    assert description.status == "failed"
    assert description.error is not None and description.error["type"] == "NondeterminismError"


def test_continue_as_new_does_not_inherit_finalizers(storage_factory: Opener) -> None:
    calls = Calls()

    def flow(ctx: WorkflowContext, run: int) -> Gen:
        ctx.on_cancel("undo", f"run {run}")
        if run == 1:
            yield ctx.continue_as_new(2)
        yield ctx.sleep("1h")

    wf = workflow("c").activities(undo=calls.fn("undo"))
    te = make_engine(storage_factory, {"c": wf.execute(flow)})
    te.start("c", 1, id="c")
    te.advance(1)
    assert te.describe("c").run == 2
    te.cancel("c")
    assert calls.log == [("undo", "run 2")]
    teardown = te.describe("c").teardown
    assert teardown is not None and len(teardown["finalizers"]) == 1


class _CrashAtTeardownWrite(CrashingStorage):
    """Crashes right after (or before) the ``n``-th write putting ``w``'s teardown record."""

    def __init__(self, inner: Storage, n: int, *, after: bool) -> None:
        super().__init__(inner)
        self.n, self.after, self.seen = n, after, 0

    def _conditional_batch(self, conditions: Any, ops: Any) -> bool:
        self._count(ops)
        return super()._conditional_batch(conditions, ops)

    def _batch(self, ops: Any) -> None:
        self._count(ops)
        super()._batch(ops)

    def _count(self, ops: list[Op]) -> None:
        if any(isinstance(op, Put) and op.key == keys.teardown_key("o") for op in ops):
            self.seen += 1
            if self.seen == self.n and not self.crashed:
                if self.after:
                    self.crash_after_write = self.writes + 1
                else:
                    self.crash_before_write = self.writes + 1


@pytest.mark.parametrize("after", [True, False], ids=["after-progress", "before-progress"])
def test_a_crash_mid_teardown_reruns_only_unfinished_finalizers(
    storage_factory: Opener, after: bool
) -> None:
    """Writes of the teardown record: 1 the terminal batch, 2 the claim, 3 the first
    finalizer's progress. A crash right after 3 re-runs only the second finalizer; a crash
    right before it re-runs both (at least once)."""
    calls = Calls()
    workflows = _workflows(calls)
    crashing = _CrashAtTeardownWrite(storage_factory(), 3, after=after)
    te = TestEngine(workflows, storage=crashing)
    te.start("order", 4, id="o")
    with expect_crash():
        te.cancel("o")
    assert _finalizer_calls(calls) == [("refund", 4)]
    recover_fresh(te, storage_factory)
    te.advance(1)  # the claim of the dead engine is still live: nothing runs
    assert len(_finalizer_calls(calls)) == 1
    te.advance(CLAIM_TTL)
    expected = [("release_hold", {"order": 4})]
    if not after:
        expected.insert(0, ("refund", 4))
    assert _finalizer_calls(calls)[1:] == expected
    teardown = te.describe("o").teardown
    assert teardown is not None and teardown["status"] == "completed"
    assert [f["attempts"] for f in teardown["finalizers"]] == [1, 1]  # committed ones
    te.advance(3600)
    assert len(_finalizer_calls(calls)) == 1 + len(expected)
    timers = [
        sort
        for shard in range(keys.TIMER_SHARDS)
        for sort, _ in te.storage.scan(keys.timer_partition(shard))
    ]
    assert not [sort for sort in timers if sort.endswith("#teardown")]  # ended with it


def test_a_registration_record_keeps_its_retry_policy() -> None:
    """The teardown may run on another engine long after the code ran: the policy is stored
    by value, ``non_retryable`` classes by name (matched along the error's MRO)."""
    from weft_serverless.finalizer import Finalizer

    policy = RetryPolicy(4, 2.0, 3.0, 60.0, (KeyError, "CardDown"))
    stored = Finalizer("refund", b"\x01", True, policy).to_record()
    back = Finalizer.from_record(stored)
    assert (back.activity, back.input, back.on_failure) == ("refund", b"\x01", True)
    assert back.retry == RetryPolicy(4, 2.0, 3.0, 60.0, ("KeyError", "CardDown"))
    assert not back.retry.is_retryable(["KeyError", "LookupError"], None)


def test_more_registrations_than_one_batch_holds_are_all_stored(storage_factory: Opener) -> None:
    """120 registrations between two yields: over DynamoDB's 100 items per batch, so they are
    stored in order, in batches that fit."""

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        for n in range(120):
            ctx.on_cancel("undo", n)
        yield ctx.sleep("1h")

    calls = Calls()
    te = make_engine(
        storage_factory, {"m": workflow("m").activities(undo=calls.fn("undo")).execute(flow)}
    )
    te.start("m", None, id="m")
    assert te.describe("m").status == "running"
    assert len(sorts_with(te.storage, "m", keys.FINALIZER_PREFIX)) == 120


def test_a_retry_without_backoff_runs_at_once(storage_factory: Opener) -> None:
    """``initial_backoff=0``: the next attempt runs in the same teardown, never behind a
    timer re-armed at the millisecond of the one being fired (which the pass then deletes)."""
    outcomes = [RuntimeError("1"), RuntimeError("2")]

    def flaky(_: Any) -> str:
        if outcomes:
            raise outcomes.pop(0)
        return "ok"

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        ctx.on_cancel("undo", 1, retry=RetryPolicy(max_attempts=3, initial_backoff=0))
        yield ctx.sleep("1h")

    te = make_engine(storage_factory, {"z": workflow("z").activities(undo=flaky).execute(flow)})
    te.start("z", None, id="z")
    te.cancel("z")
    teardown = te.describe("z").teardown
    assert teardown is not None and teardown["status"] == "completed"
    assert [(f["state"], f["attempts"]) for f in teardown["finalizers"]] == [("done", 3)]


def test_a_teardown_waits_for_an_invocation_with_time_left(storage_factory: Opener) -> None:
    """Inside an invocation nearly out of time no finalizer starts; the claim is released and
    the due timer stays, so the next maintenance pass runs them."""
    calls = Calls()
    te = make_engine(storage_factory, _workflows(calls))
    te.start("order", 2, id="o")
    with te.engine.invocation(time_left=lambda: 0.5, step_reserve=1.0):
        te.cancel("o")
    assert _finalizer_calls(calls) == []
    teardown = te.describe("o").teardown
    assert teardown is not None and (teardown["status"], teardown["holder"]) == ("pending", None)
    te.advance(0)
    assert _finalizer_calls(calls) == [("refund", 2), ("release_hold", {"order": 2})]
