"""Bounded history: ``workflow(..., max_history=N)`` lets a run commit at most N step records.

Rules pinned here: the step that would commit record N+1 runs nothing (no activity call, no
signal consumed) and the run ends ``failed`` with ``HistoryLimitExceededError`` carrying the
count and the limit; a run of exactly N steps completes; branches of ``ctx.all`` count, one
record each, and so does the ``all`` itself; the count is the stored records', so it holds
across a restart and under a redeploy with a smaller bound; a bad bound is refused when the
workflow is declared.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    op_sigs,
    puts_state,
    recover_fresh,
    sorts_with,
)

from weft_serverless import (
    HistoryLimitExceededError,
    InvalidArgumentError,
    WorkflowDefinition,
    WorkflowFailedError,
    workflow,
)
from weft_serverless.storage import keys

WF = "wf-poll"


def _poll(ctx: Any, rounds: int) -> Any:
    seen = []
    for i in range(rounds):
        seen.append((yield ctx.run("probe", i)))
    return seen


def _defs(calls: Calls, body: Any = _poll, limit: int | None = 3) -> dict[str, WorkflowDefinition]:
    builder = workflow("poll", max_history=limit).activities(probe=calls.fn("probe"))
    return {"poll": builder.execute(body)}


def _assert_limit_failure(te: Any, count: int, limit: int) -> None:
    description = te.describe(WF)
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "HistoryLimitExceededError"
    assert description.error["count"] == count
    assert description.error["limit"] == limit
    assert f"committed {count} step records" in description.error["message"]


def test_the_step_beyond_the_bound_fails_the_run_and_runs_nothing(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _defs(calls))
    handle = te.start("poll", 10, id=WF)
    _assert_limit_failure(te, count=3, limit=3)
    assert calls.log == [("probe", 0), ("probe", 1), ("probe", 2)]
    assert len(sorts_with(te.storage, WF, keys.OP_PREFIX)) == 3
    with pytest.raises(WorkflowFailedError) as raised:
        handle.result()
    assert raised.value.error_type == "HistoryLimitExceededError"


def test_a_run_of_exactly_the_bound_completes(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _defs(calls))
    te.start("poll", 3, id=WF)
    description = te.describe(WF)
    assert description.status == "completed"
    assert description.result == [0, 1, 2]


def test_without_a_bound_a_run_grows(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _defs(calls, limit=None))
    te.start("poll", 12, id=WF)
    assert te.describe(WF).status == "completed"
    assert len(sorts_with(te.storage, WF, keys.OP_PREFIX)) == 12


def test_branches_of_all_count_and_so_does_the_all(storage_factory: Opener) -> None:
    """``all`` of two activities commits three records (two branches and the all): under a
    bound of 2 both branches run and the all's own record is refused."""

    def fan(ctx: Any, _: Any) -> Any:
        return (yield ctx.all([ctx.run("probe", "a"), ctx.run("probe", "b")]))

    calls = Calls()
    te = make_engine(storage_factory, _defs(calls, fan, limit=2))
    te.start("poll", id=WF)
    _assert_limit_failure(te, count=2, limit=2)
    assert sorted(calls.log) == [("probe", "a"), ("probe", "b")]


def test_the_refused_step_consumes_no_signal(storage_factory: Opener) -> None:
    """The wait that would take the third place leaves its buffered signal stored."""

    def waits(ctx: Any, _: Any) -> Any:
        yield ctx.run("probe", 1)
        yield ctx.wait_for_signal("a")
        return (yield ctx.wait_for_signal("go"))

    calls = Calls()
    te = make_engine(storage_factory, _defs(calls, waits, limit=2))
    te.start("poll", id=WF)
    te.signal(WF, "go", "kept")
    assert len(sorts_with(te.storage, WF, keys.signal_prefix("go"))) == 1
    te.signal(WF, "a", "taken")
    _assert_limit_failure(te, count=2, limit=2)
    assert op_sigs(te.storage, WF) == ["run:probe", "signal:a"]
    assert len(sorts_with(te.storage, WF, keys.signal_prefix("go"))) == 1


def test_the_count_is_the_stored_records_across_a_restart(storage_factory: Opener) -> None:
    """A run parked after two steps and recovered by a fresh engine still has only one
    step left; a redeploy with a bound its history already reached fails it when the
    recovering engine carries its parked step on."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.run("probe", 1)
        yield ctx.run("probe", 2)
        got = yield ctx.wait_for_signal("go")
        yield ctx.run("probe", 3)
        return got

    calls = Calls()
    te = make_engine(storage_factory, _defs(calls, body, limit=3))
    te.start("poll", id=WF)
    recover_fresh(te, storage_factory)
    te.signal(WF, "go", "x")
    _assert_limit_failure(te, count=3, limit=3)
    assert calls.log == [("probe", 1), ("probe", 2)]

    calls2 = Calls()
    te2 = make_engine(storage_factory, _defs(calls2, body, limit=10))
    te2.start("poll", id="wf-other")
    recover_fresh(te2, storage_factory, _defs(calls2, body, limit=2))
    description = te2.describe("wf-other")
    assert description.status == "failed"
    assert description.error is not None
    assert (description.error["count"], description.error["limit"]) == (2, 2)


def test_a_crash_before_the_failing_end_fails_it_again_on_recovery(
    storage_factory: Opener,
) -> None:
    """The failed end is one batch: a crash just before it leaves the run running with its
    three records; the recovering engine refuses the same step again and runs nothing."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.wait_for_signal("go")
        for _ in range(5):
            yield ctx.run("probe", "again")

    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _defs(calls, body))
    te.start("poll", id=WF)
    crashing.arm(puts_state(WF), after=False)  # the next state put: the failed end
    with expect_crash():
        te.signal(WF, "go")
    assert len(calls.log) == 2
    recover_fresh(te, storage_factory)
    _assert_limit_failure(te, count=3, limit=3)
    assert len(calls.log) == 2


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_a_bad_bound_is_refused_when_declared(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        workflow("poll", max_history=bad)
    assert raised.value.field == "max_history"
    assert raised.value.code == "InvalidArgumentError"


def test_the_error_carries_reason_count_and_limit() -> None:
    error = HistoryLimitExceededError("wf-1", 5, 5)
    assert (error.count, error.limit, error.code) == (5, 5, "HistoryLimitExceededError")
    assert "at most 5" in error.reason
