"""Run lifecycle controls: execution timeout, delayed start, start-or-signal, suspend/resume,
retry of a failed run.

Rules pinned here: ``execution_timeout`` ends a run ``timed-out`` when it passes (not before)
and ``result()`` raises ``WorkflowTimedOutError``; ``start_at``/``start_after`` keep a run
``pending`` until due; ``start_or_signal`` creates an absent run with the signal buffered in the
same batch, signals a running one and refuses a finished one; a suspended run does nothing and
a sleep that fell due meanwhile fires after ``resume`` (its timer is re-armed with the resume)
and a run suspended before its delayed start resumes to ``pending`` until its start time;
``retry`` re-runs a failed run's failed step from its last good step. Each transition is one
write: a crash right after it is recovered by a fresh engine.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from feature_support import (
    T0,
    Calls,
    Opener,
    WriteCount,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
    puts_state,
    recover_fresh,
    refused,
)

from weft_serverless import (
    InvalidArgumentError,
    RetryPolicy,
    UnknownWorkflowTypeError,
    WorkflowDefinition,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    WorkflowTimedOutError,
    workflow,
)
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

WF = "wf-job"


def _job(ctx: Any, _: Any) -> Any:
    first = yield ctx.run("step", "a")
    yield ctx.sleep(10)
    second = yield ctx.run("step", "b")
    return [first, second]


def _inbox(ctx: Any, owner: str) -> Any:
    """Collects ``msg`` signals until one says ``stop``."""
    messages: list[Any] = []
    while True:
        message = yield ctx.wait_for_signal("msg")
        if message == "stop":
            return {"owner": owner, "messages": messages}
        messages.append(message)


def _workflows(calls: Calls) -> dict[str, WorkflowDefinition]:
    return {
        "job": workflow("job").activities(step=calls.fn("step")).execute(_job),
        "inbox": workflow("inbox").execute(_inbox),
    }


def _engine(storage_factory: Opener, calls: Calls) -> TestEngine:
    return make_engine(storage_factory, _workflows(calls))


# -- execution timeout ---------------------------------------------------------------------


def test_execution_timeout_ends_the_run_timed_out(storage_factory: Opener) -> None:
    """At the deadline (not before) the run becomes ``timed-out``, ``result()`` raises
    ``WorkflowTimedOutError``, and nothing of it runs afterwards."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    handle = te.start("job", id=WF, execution_timeout="5s")
    te.advance(4.9)
    assert te.describe(WF).status == "running"
    te.advance(0.2)
    description = te.describe(WF)
    assert description.status == "timed-out"
    assert description.error is not None
    assert description.error["type"] == "WorkflowTimedOutError"
    with pytest.raises(WorkflowTimedOutError):
        handle.result()
    te.advance(20)
    assert calls.log == [("step", "a")]
    assert te.describe(WF).status == "timed-out"


def test_crash_right_after_the_timeout_transition(storage_factory: Opener) -> None:
    """Crash just after the timed-out state is written: the fresh engine keeps it timed-out
    and never runs the rest, even when its sleep falls due."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    te.start("job", id=WF, execution_timeout=5)
    crashing.arm(puts_state(WF), after=True)
    with expect_crash():
        te.advance(6)
    recover_fresh(te, storage_factory)
    te.advance(20)
    assert te.describe(WF).status == "timed-out"
    assert calls.log == [("step", "a")]


def test_execution_timeout_counts_from_a_delayed_start(storage_factory: Opener) -> None:
    """With a delayed start the timeout runs from the moment the run starts."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF, start_after=30, execution_timeout=5)
    te.advance(34.9)
    assert te.describe(WF).status == "running"
    te.advance(0.2)
    assert te.describe(WF).status == "timed-out"


BAD_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("zero-timeout", {"execution_timeout": 0}),
    ("negative-timeout", {"execution_timeout": -1}),
    ("unparsable-timeout", {"execution_timeout": "soon"}),
    ("both-starts", {"start_at": T0 + 60, "start_after": 60}),
    ("naive-datetime", {"start_at": datetime.datetime(2030, 1, 1)}),  # ambiguous
    ("start-at-text", {"start_at": "tomorrow"}),
]


def test_bad_lifecycle_options_store_nothing(storage_factory: Opener) -> None:
    """Bad timeouts and start times are ``InvalidArgumentError`` before anything is written."""
    te = _engine(storage_factory, Calls())
    writes = WriteCount.of(te.storage)
    for case, options in BAD_OPTIONS:
        with refused(case, InvalidArgumentError):
            te.start("job", id=WF, **options)
    assert WriteCount.of(te.storage) == writes
    with pytest.raises(WorkflowNotFoundError):
        te.describe(WF)


# -- delayed start -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"start_after": "1m"},
        {"start_at": datetime.datetime.fromtimestamp(T0 + 60, tz=datetime.UTC)},
    ],
    ids=["start-after", "start-at"],
)
def test_delayed_start_is_pending_until_due(
    storage_factory: Opener, options: dict[str, Any]
) -> None:
    """The run is ``pending`` (nothing runs) until its start time, then runs."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF, **options)
    assert te.describe(WF).status == "pending"
    te.advance(59.9)
    assert te.describe(WF).status == "pending"
    assert calls.log == []
    te.advance(0.2)
    assert te.describe(WF).status == "running"
    assert calls.log == [("step", "a")]
    te.advance(10.1)
    assert te.describe(WF).result == ["a", "b"]


def test_start_at_in_the_past_starts_now(storage_factory: Opener) -> None:
    """A start time already passed is not a delay."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF, start_at=T0 - 3600)
    assert te.describe(WF).status == "running"
    assert calls.log == [("step", "a")]


def test_a_pending_run_survives_a_restart(storage_factory: Opener) -> None:
    """A fresh engine neither starts a pending run early nor forgets it."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF, start_after=60)
    recover_fresh(te, storage_factory)
    te.advance(59.9)
    assert te.describe(WF).status == "pending"
    te.advance(0.2)
    assert calls.log == [("step", "a")]


def test_crash_right_after_the_delayed_start_activates(storage_factory: Opener) -> None:
    """Crash just after pending -> running is written (before the first step): the fresh
    engine drives it from the start, and its first step runs once."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    te.start("job", id=WF, start_after=60)
    crashing.arm(puts_state(WF), after=True)
    with expect_crash():
        te.advance(60)
    assert calls.log == []
    recover_fresh(te, storage_factory)
    te.advance(10)
    assert te.describe(WF).result == ["a", "b"]
    assert calls.log == [("step", "a"), ("step", "b")]


# -- start or signal -----------------------------------------------------------------------


def test_start_or_signal_creates_signals_and_refuses(storage_factory: Opener) -> None:
    """Absent: created, and its first wait gets the signal; running: signalled (the new input
    is ignored); finished: ``WorkflowNotRunningError`` and nothing written."""
    te = _engine(storage_factory, Calls())
    te.start_or_signal("inbox", "ann", id=WF, signal="msg", payload="hello")
    assert te.describe(WF).status == "running"
    te.start_or_signal("inbox", "bob", id=WF, signal="msg", payload="again")
    te.start_or_signal("inbox", "bob", id=WF, signal="msg", payload="stop")
    assert te.describe(WF).result == {"owner": "ann", "messages": ["hello", "again"]}
    writes = WriteCount.of(te.storage)
    with pytest.raises(WorkflowNotRunningError):
        te.start_or_signal("inbox", "cid", id=WF, signal="msg", payload="late")
    assert WriteCount.of(te.storage).items == writes.items


def test_start_or_signal_writes_run_and_signal_in_one_batch(storage_factory: Opener) -> None:
    """Crash just before the write carrying the signal: the run does not exist either (they
    are one batch); the retry after recovery creates both."""
    te, crashing = crashable_engine(storage_factory, _workflows(Calls()))
    crashing.arm(puts_prefix(keys.SIGNAL_PREFIX, WF), after=False)
    with expect_crash():
        te.start_or_signal("inbox", "ann", id=WF, signal="msg", payload="hello")
    recover_fresh(te, storage_factory)
    with pytest.raises(WorkflowNotFoundError):
        te.describe(WF)
    te.start_or_signal("inbox", "ann", id=WF, signal="msg", payload="hello")
    te.signal(WF, "msg", "stop")
    assert te.describe(WF).result == {"owner": "ann", "messages": ["hello"]}


def test_start_or_signal_crash_after_the_batch(storage_factory: Opener) -> None:
    """Crash right after the start batch: the fresh engine runs the new run, which consumes
    the buffered signal; a retry with the same ``signal_id`` delivers nothing twice."""
    te, crashing = crashable_engine(storage_factory, _workflows(Calls()))
    crashing.arm(puts_prefix(keys.SIGNAL_PREFIX, WF), after=True)
    with expect_crash():
        te.start_or_signal("inbox", "ann", id=WF, signal="msg", payload="hello", signal_id="s1")
    recover_fresh(te, storage_factory)
    te.start_or_signal("inbox", "ann", id=WF, signal="msg", payload="hello", signal_id="s1")
    te.signal(WF, "msg", "stop")
    assert te.describe(WF).result == {"owner": "ann", "messages": ["hello"]}


@pytest.mark.parametrize(
    ("workflow_type", "signal", "error"),
    [("inbox", "", InvalidArgumentError), ("nope", "msg", UnknownWorkflowTypeError)],
    ids=["empty-signal", "unknown-type"],
)
def test_bad_start_or_signal_stores_nothing(
    storage_factory: Opener, workflow_type: str, signal: str, error: type[Exception]
) -> None:
    """A bad signal name or workflow type fails before any write."""
    te = _engine(storage_factory, Calls())
    writes = WriteCount.of(te.storage)
    with pytest.raises(error):
        te.start_or_signal(workflow_type, None, id=WF, signal=signal)
    assert WriteCount.of(te.storage) == writes


# -- suspend and resume --------------------------------------------------------------------


def test_a_sleep_due_while_suspended_fires_after_resume(storage_factory: Opener) -> None:
    """While suspended nothing runs (a due sleep, a signal); ``resume`` re-arms the sleep's
    timer and the run carries on."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF)
    te.suspend(WF)
    assert te.describe(WF).status == "suspended"
    te.advance(30)
    te.signal(WF, "poke")
    assert te.describe(WF).status == "suspended"
    assert calls.log == [("step", "a")]
    te.resume(WF)
    te.run_maintenance()
    assert te.describe(WF).result == ["a", "b"]
    assert calls.log == [("step", "a"), ("step", "b")]


def test_resume_before_the_sleep_is_due_keeps_its_time(storage_factory: Opener) -> None:
    """Suspended and resumed before the sleep falls due: it fires at its original time."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF)
    te.suspend(WF)
    te.advance(3)
    assert te.resume(WF) == "running"
    te.advance(6.9)
    assert calls.count("step") == 1
    te.advance(0.2)
    assert te.describe(WF).result == ["a", "b"]


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_resume_of_a_suspended_delayed_run_waits_for_its_start_time(
    storage_factory: Opener, ownership: str
) -> None:
    """``start_after="1h"``, suspend, resume a minute later: the run is ``pending`` again,
    nothing runs and nobody holds it; it starts at its original start time, not earlier."""
    calls = Calls()
    te = make_engine(storage_factory, _workflows(calls), ownership=ownership)
    te.start("job", id=WF, start_after="1h")
    te.suspend(WF)
    te.advance(60)
    assert te.resume(WF) == "pending"
    assert te.describe(WF).status == "pending" and te.describe(WF).owner is None
    te.advance(3600 - 60 - 0.1)
    assert te.describe(WF).status == "pending" and calls.log == []
    te.advance(0.2)
    assert calls.log == [("step", "a")]
    te.advance(10.1)
    assert te.describe(WF).result == ["a", "b"]


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_resume_of_a_delayed_run_after_its_start_time_starts_it_at_once(
    storage_factory: Opener, ownership: str
) -> None:
    """Suspended while pending and resumed after its start time passed (its delayed-start
    timer fell due meanwhile and was collected): the resume starts it at once, once."""
    calls = Calls()
    te = make_engine(storage_factory, _workflows(calls), ownership=ownership)
    te.start("job", id=WF, start_after=60)
    te.suspend(WF)
    te.advance(120)
    assert calls.log == []
    assert te.resume(WF) == "running"
    assert calls.log == [("step", "a")]
    te.advance(10.1)
    assert te.describe(WF).result == ["a", "b"]
    assert calls.count("step") == 2


def test_crash_right_after_resume_of_a_delayed_run_keeps_its_start_time(
    storage_factory: Opener,
) -> None:
    """Crash just after the resume's write of a suspended delayed run: it is pending with
    its delayed-start timer re-armed in that batch, so a fresh engine starts it on time."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    te.start("job", id=WF, start_after=600)
    te.suspend(WF)
    te.advance(60)
    crashing.arm(puts_state(WF), after=True)
    with expect_crash():
        te.resume(WF)
    recover_fresh(te, storage_factory)
    assert te.describe(WF).status == "pending"
    te.advance(539.9)
    assert calls.log == []
    te.advance(0.2)
    assert calls.log == [("step", "a")]


def test_a_delayed_run_suspended_by_an_earlier_release_resumes_to_pending(
    storage_factory: Opener,
) -> None:
    """A suspended record without ``suspended_from`` (as releases before it was kept wrote
    it) whose start time is still ahead never started: resume puts it back to pending."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF, start_after=600)
    te.suspend(WF)
    store = storage_factory()
    state = WorkflowState.from_bytes(store.get(keys.state_key(WF)) or b"")
    del state.extra["suspended_from"]
    store.put(keys.state_key(WF), state.to_bytes())
    te.advance(60)
    assert te.resume(WF) == "pending"
    te.advance(539.9)
    assert calls.log == []
    te.advance(0.2)
    assert calls.log == [("step", "a")]


def test_suspended_run_survives_a_restart_and_resumes(storage_factory: Opener) -> None:
    """A fresh engine does not drive a suspended run; resuming it there works."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("job", id=WF)
    te.suspend(WF)
    recover_fresh(te, storage_factory)
    te.advance(30)
    assert te.describe(WF).status == "suspended"
    te.resume(WF)
    te.run_maintenance()
    assert te.describe(WF).result == ["a", "b"]


def test_crash_right_after_resume_keeps_the_rearmed_timer(storage_factory: Opener) -> None:
    """Crash just after the resume's write: the timer it re-armed landed in the same batch,
    so the fresh engine's maintenance fires the sleep."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    te.start("job", id=WF)
    te.suspend(WF)
    te.advance(30)
    crashing.arm(puts_state(WF), after=True)
    with expect_crash():
        te.resume(WF)
    recover_fresh(te, storage_factory)
    te.run_maintenance()
    assert te.describe(WF).result == ["a", "b"]
    assert calls.count("step") == 2


def test_bad_suspend_and_resume_calls(storage_factory: Opener) -> None:
    """Suspending a finished run is ``WorkflowNotRunningError``; unknown ids are
    ``WorkflowNotFoundError``; suspending twice is harmless."""
    te = _engine(storage_factory, Calls())
    te.start("inbox", "ann", id=WF)
    te.suspend(WF)
    te.suspend(WF)
    assert te.describe(WF).status == "suspended"
    te.resume(WF)
    te.signal(WF, "msg", "stop")
    assert te.describe(WF).status == "completed"
    with pytest.raises(WorkflowNotRunningError):
        te.suspend(WF)
    with pytest.raises(WorkflowNotFoundError):
        te.suspend("nobody")
    with pytest.raises(WorkflowNotFoundError):
        te.resume("nobody")


# -- retry of a failed run -----------------------------------------------------------------


def _flaky_workflows(calls: Calls, broken: list[bool]) -> dict[str, WorkflowDefinition]:
    def fragile(value: str) -> str:
        calls.log.append(("fragile", value))
        if broken[0]:
            raise RuntimeError("disk full")
        return value.upper()

    def body(ctx: Any, _: Any) -> Any:
        first = yield ctx.run("step", "a")
        second = yield ctx.run("fragile", "b", retry=RetryPolicy(max_attempts=1))
        third = yield ctx.run("step", "c")
        return [first, second, third]

    builder = workflow("pipeline").activities(step=calls.fn("step"), fragile=fragile)
    return {"pipeline": builder.execute(body)}


def test_retry_reruns_the_failed_step_only(storage_factory: Opener) -> None:
    """A failed run, once retried (here on a fresh engine), re-runs its failed step and goes
    on; the steps that had completed are not run again."""
    calls, broken = Calls(), [True]
    te = make_engine(storage_factory, _flaky_workflows(calls, broken))
    te.start("pipeline", id=WF)
    assert te.describe(WF).status == "failed"
    broken[0] = False
    recover_fresh(te, storage_factory)
    te.retry(WF)
    assert te.describe(WF).result == ["a", "B", "c"]
    assert calls.names() == ["step", "fragile", "fragile", "step"]


def test_crash_right_after_the_retry_transition(storage_factory: Opener) -> None:
    """Crash just after failed -> running is written: the fresh engine carries the run on."""
    calls, broken = Calls(), [True]
    te, crashing = crashable_engine(storage_factory, _flaky_workflows(calls, broken))
    te.start("pipeline", id=WF)
    broken[0] = False
    crashing.arm(puts_state(WF), after=True)
    with expect_crash():
        te.retry(WF)
    recover_fresh(te, storage_factory)
    assert te.describe(WF).result == ["a", "B", "c"]
    assert calls.names() == ["step", "fragile", "fragile", "step"]


def test_retry_refuses_runs_that_did_not_fail(storage_factory: Opener) -> None:
    """Only a failed run can be retried; others are refused without writing."""
    te = _engine(storage_factory, Calls())
    te.start("inbox", "ann", id=WF)
    writes = WriteCount.of(te.storage)
    with pytest.raises(InvalidArgumentError):
        te.retry(WF)
    with pytest.raises(WorkflowNotFoundError):
        te.retry("nobody")
    assert WriteCount.of(te.storage) == writes
