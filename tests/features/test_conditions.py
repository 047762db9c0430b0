"""Conditions: ``ctx.wait_until(predicate, timeout=)`` parks until an update makes it true.

Rules pinned here: the predicate is re-checked whenever an update changes state and the wait
gives ``True`` as soon as it holds (at once, without parking, if it already does); with a
timeout it gives ``False`` when the timeout passes on the engine clock, never earlier; the
deadline is durable (it survives a restart); a crash right after the step that records the
outcome is recovered without running what follows twice.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    appending,
    crashable_engine,
    expect_crash,
    make_engine,
    op_sigs,
    puts_op,
    recover_fresh,
    sorts_with,
)

from weft_serverless import WorkflowDefinition, workflow
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

WF = "wf-gate"


def _gate(ctx: Any, timeout: float | None) -> Any:
    """Opens after two approvals (sent as updates), or gives up after ``timeout``."""
    approvals: list[str] = []
    ctx.on_update("approve", appending(approvals))
    opened = yield ctx.wait_until(lambda: len(approvals) >= 2, timeout=timeout)
    yield ctx.run("after", opened)
    return {"opened": opened, "approvals": approvals}


def _workflows(calls: Calls) -> dict[str, WorkflowDefinition]:
    return {"gate": workflow("gate").activities(after=calls.fn("after")).execute(_gate)}


def _engine(storage_factory: Opener, calls: Calls) -> TestEngine:
    return make_engine(storage_factory, _workflows(calls))


def test_wait_until_is_rechecked_after_each_update(storage_factory: Opener) -> None:
    """Normal path: an update that leaves the predicate false keeps the run parked; the one
    that makes it true resumes it with ``True``."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("gate", None, id=WF)
    assert te.update(WF, "approve", "ann") == 1
    assert te.describe(WF).status == "running"
    assert calls.log == []
    assert te.update(WF, "approve", "bob") == 2
    assert te.describe(WF).result == {"opened": True, "approvals": ["ann", "bob"]}
    assert calls.log == [("after", True)]


def test_a_predicate_that_already_holds_does_not_park(storage_factory: Opener) -> None:
    """A true predicate answers ``True`` at once: no pending record, no timer, one step."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.wait_until(lambda: True, timeout="1h"))

    te = make_engine(storage_factory, {"now": workflow("now").execute(body)})
    te.start("now", id=WF)
    assert te.describe(WF).result is True
    assert sorts_with(te.storage, WF, keys.PENDING_PREFIX) == []
    assert op_sigs(te.storage, WF) == ["condition"]


def test_timeout_gives_false_when_due_and_not_before(storage_factory: Opener) -> None:
    """With a timeout the wait gives ``False`` once the engine clock reaches it, not earlier."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("gate", 60, id=WF)
    te.update(WF, "approve", "ann")
    te.advance(59.9)
    assert te.describe(WF).status == "running"
    assert calls.log == []
    te.advance(0.2)
    assert te.describe(WF).result == {"opened": False, "approvals": ["ann"]}
    assert calls.log == [("after", False)]


def test_the_deadline_survives_a_restart(storage_factory: Opener) -> None:
    """A fresh engine after a crash keeps the original deadline: not early, not lost."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("gate", 60, id=WF)
    te.advance(30)
    recover_fresh(te, storage_factory)
    te.advance(29.9)
    assert te.describe(WF).status == "running"
    te.advance(0.2)
    assert te.describe(WF).result == {"opened": False, "approvals": []}


def test_crash_right_after_the_timed_out_wait_commits(storage_factory: Opener) -> None:
    """Crash just after the wait's ``False`` is committed: recovery continues from there, runs
    the next activity once, and a re-fired timer changes nothing."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    te.start("gate", 60, id=WF)
    crashing.arm(puts_op(WF, 0), after=True)
    with expect_crash():
        te.advance(61)
    recover_fresh(te, storage_factory)
    te.advance(1)
    assert te.describe(WF).result == {"opened": False, "approvals": []}
    assert calls.log == [("after", False)]


def test_predicate_errors_and_bad_arguments_raise_at_the_yield(storage_factory: Opener) -> None:
    """A predicate that raises throws its error at the ``wait_until`` (the workflow may catch
    it, nothing is recorded for it); a bad argument fails at the call."""

    def body(ctx: Any, mode: str) -> Any:
        if mode == "not-callable":
            yield ctx.wait_until(True)
        if mode == "bad-timeout":
            yield ctx.wait_until(lambda: True, timeout="soon")
        try:
            yield ctx.wait_until(lambda: 1 / 0 > 0)
        except ZeroDivisionError:
            return "caught"
        return "not raised"

    te = make_engine(storage_factory, {"odd": workflow("odd").execute(body)})
    te.start("odd", "raises", id="wf-raises")
    assert te.describe("wf-raises").result == "caught"
    assert op_sigs(te.storage, "wf-raises") == []
    for mode in ("not-callable", "bad-timeout"):
        te.start("odd", mode, id=f"wf-{mode}")
        description = te.describe(f"wf-{mode}")
        assert description.status == "failed"
        assert description.error is not None
        assert description.error["type"] == "InvalidArgumentError"


@pytest.mark.parametrize("approvals", [0, 1])
def test_timeout_outcome_does_not_depend_on_earlier_updates(
    storage_factory: Opener, approvals: int
) -> None:
    """Updates that leave the predicate false do not move the deadline."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("gate", 10, id=WF)
    for index in range(approvals):
        te.advance(4)
        te.update(WF, "approve", f"p{index}")
    te.advance(10.1 - 4 * approvals)
    result = te.describe(WF).result
    assert result is not None
    assert result["opened"] is False
