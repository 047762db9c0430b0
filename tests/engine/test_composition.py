"""Composition: ``ctx.all``, ``ctx.race`` and child workflows, live and across crashes."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import (
    T0,
    Opener,
    WriteLog,
    advance_to,
    buffered_signals,
    make_engine,
    op_records,
    op_signatures,
    stored_timers,
)

from weft_serverless import (
    ActivityFailedError,
    ChildWorkflowFailedError,
    RetryPolicy,
    WorkflowFailedError,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine


def _noop(value: Any = None) -> Any:
    return value


ACTIVITIES = {"a": _noop, "b": _noop, "bad": _noop}
NO_RETRY = RetryPolicy(max_attempts=1)


def define(name: str, body: Any) -> dict[str, Any]:
    return {name: workflow(name).activities(**ACTIVITIES).execute(body)}


def mocks(te: TestEngine) -> None:
    te.mock("a", impl=lambda x: f"a({x})")
    te.mock("b", impl=lambda x: f"b({x})")
    te.mock("bad", raises=ValueError("broken"))


def calls(te: TestEngine) -> dict[str, int]:
    return {name: mock.call_count for name, mock in te.mocks.items()}


# -- all -------------------------------------------------------------------------------------


def test_all_returns_results_in_command_order(storage_factory: Opener) -> None:
    """``all`` of runs gives the list of results in the order given, varargs or a list."""

    def body(ctx: Any, _: Any) -> Any:
        first = yield ctx.all(ctx.run("a", 1), ctx.run("b", 2))
        second = yield ctx.all([ctx.run("b", 3), ctx.run("a", 4)])
        return [first, second]

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    assert te.start("w", id="w").result() == [["a(1)", "b(2)"], ["b(3)", "a(4)"]]
    assert op_signatures(te.storage, "w") == ["all(run:a,run:b)", "all(run:b,run:a)"]


def test_all_waits_for_every_branch_and_runs_each_once(storage_factory: Opener) -> None:
    """A sleep, a run and a signal wait in ``all``: finished branches are not re-run while the
    others wait, and the step completes when the last one does."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(ctx.sleep("5s"), ctx.run("a", 1), ctx.wait_for_signal("x")))

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    handle = te.start("w", id="w")
    assert calls(te)["a"] == 1
    te.clock.advance(1)
    te.signal("w", "x", "sig")
    assert te.describe("w").status == "running"
    advance_to(te, T0 + 5 - 0.001)
    assert te.describe("w").status == "running"
    advance_to(te, T0 + 5)
    assert handle.result() == [None, "a(1)", "sig"]
    assert calls(te)["a"] == 1
    assert buffered_signals(te.storage, "w") == []


def test_all_branch_failure_is_raised_at_the_yield(storage_factory: Opener) -> None:
    """A failing branch throws its ActivityFailedError into the workflow, which may catch it."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.all(ctx.run("a", 1), ctx.run("bad", retry=NO_RETRY))
        except ActivityFailedError as exc:
            return {"activity": exc.activity, "type": exc.error_type, "msg": exc.error_message}
        return "unreachable"

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    assert te.start("w", id="w").result() == {
        "activity": "bad",
        "type": "ValueError",
        "msg": "broken",
    }


def test_all_replays_after_a_crash_without_rerunning_branches(storage_factory: Opener) -> None:
    """A recovered run answers a finished ``all`` (and its branches) from the op log."""

    def body(ctx: Any, _: Any) -> Any:
        pair = yield ctx.all(ctx.run("a", 1), ctx.run("b", 2))
        done = yield ctx.wait_for_signal("go")
        return [pair, done]

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    te.start("w", id="w")
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "go", "yes")
    assert te.get_handle("w").result() == [["a(1)", "b(2)"], "yes"]
    assert calls(te) == {"a": 1, "b": 1, "bad": 0}


def test_all_with_a_branch_parked_recovers_finished_branches(storage_factory: Opener) -> None:
    """A crash while ``all`` waits keeps its finished branches: they are not run again."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(ctx.run("a", 1), ctx.wait_for_signal("x"), ctx.run("b", 2)))

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    te.start("w", id="w")
    branch_sigs = [op["sig"] for op in op_records(te.storage, "w", branches=True)]
    assert branch_sigs == ["run:a", "run:b"]
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "x", "sig")
    assert te.get_handle("w").result() == ["a(1)", "sig", "b(2)"]
    assert calls(te) == {"a": 1, "b": 1, "bad": 0}


# -- race ------------------------------------------------------------------------------------


def test_race_first_ready_command_wins_with_its_index(storage_factory: Opener) -> None:
    """``race`` returns ``(index, value)`` of the winner; a losing sleep leaves no timer."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.race(ctx.sleep("1h"), ctx.run("a", 1)))

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    assert te.start("w", id="w").result() == (1, "a(1)")
    assert stored_timers(te.storage) == []
    te.advance(3600)
    assert calls(te)["a"] == 1


def test_race_timer_wins_when_nothing_else_is_ready(storage_factory: Opener) -> None:
    """A sleep wins a race against a wait at its due time, not before."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.race(ctx.wait_for_signal("x"), ctx.sleep("10s")))

    te = make_engine(storage_factory, define("w", body))
    handle = te.start("w", id="w")
    advance_to(te, T0 + 10 - 0.001)
    assert te.describe("w").status == "running"
    advance_to(te, T0 + 10)
    assert handle.result() == (1, None)


def test_race_signal_wins_and_cancels_the_losing_timer(storage_factory: Opener) -> None:
    """A signal arriving first wins; the losing sleep's timer is removed and never fires."""

    def body(ctx: Any, _: Any) -> Any:
        won = yield ctx.race(ctx.sleep("10s"), ctx.wait_for_signal("x"))
        after = yield ctx.run("a", "after")
        return [won, after]

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    handle = te.start("w", id="w")
    te.clock.advance(3)
    te.signal("w", "x", "sig")
    assert handle.result() == [(1, "sig"), "a(after)"]
    assert stored_timers(te.storage) == []
    report = advance_to(te, T0 + 10)
    assert report.timers_fired == 0
    assert calls(te)["a"] == 1


def test_race_losing_signal_wait_leaves_its_signal_buffered(storage_factory: Opener) -> None:
    """With both signals buffered, the winner consumes its own; the loser's stays for later."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.sleep("1s")
        won = yield ctx.race(ctx.wait_for_signal("x"), ctx.wait_for_signal("y"))
        yield ctx.wait_for_signal("continue")
        later = yield ctx.wait_for_signal("y")
        return [won, later]

    te = make_engine(storage_factory, define("w", body))
    handle = te.start("w", id="w")
    te.signal("w", "x", "x-payload")
    te.signal("w", "y", "y-payload")
    advance_to(te, T0 + 1)
    assert op_signatures(te.storage, "w")[1] == "race(signal:x,signal:y)"
    assert buffered_signals(te.storage, "w", "x") == []
    assert buffered_signals(te.storage, "w", "y") == ["y-payload"]
    te.signal("w", "continue")
    assert handle.result() == [(0, "x-payload"), "y-payload"]


def test_race_losing_run_is_not_started(storage_factory: Opener) -> None:
    """Branches after a ready winner are not carried out (their activity never runs)."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.sleep("1s")
        return (yield ctx.race(ctx.wait_for_signal("x"), ctx.run("a", 1)))

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    handle = te.start("w", id="w")
    te.signal("w", "x", "first")
    advance_to(te, T0 + 1)
    assert handle.result() == (0, "first")
    assert calls(te)["a"] == 0


def test_race_failure_of_the_winner_is_raised_at_the_yield(storage_factory: Opener) -> None:
    """A winning branch that failed throws its error into the workflow."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.race(ctx.run("bad", retry=NO_RETRY), ctx.sleep("1h"))
        except ActivityFailedError as exc:
            return exc.error_message
        return "unreachable"

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    assert te.start("w", id="w").result() == "broken"
    assert stored_timers(te.storage) == []


def test_race_replays_after_a_crash(storage_factory: Opener) -> None:
    """A finished race is answered from the op log after a restart; nothing re-runs."""

    def body(ctx: Any, _: Any) -> Any:
        won = yield ctx.race(ctx.wait_for_signal("x"), ctx.run("a", 1))
        done = yield ctx.wait_for_signal("go")
        return [won, done]

    te = make_engine(storage_factory, define("w", body))
    mocks(te)
    te.start("w", id="w")
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "x", "late")
    te.signal("w", "go", "yes")
    assert te.get_handle("w").result() == [(1, "a(1)"), "yes"]
    assert calls(te)["a"] == 1
    assert buffered_signals(te.storage, "w", "x") == ["late"]


# -- child workflows -------------------------------------------------------------------------


def _child(ctx: Any, value: Any) -> Any:
    if value == "fail":
        raise ValueError("child broke")
    if value == "wait":
        return (yield ctx.wait_for_signal("release"))
    return (yield ctx.run("a", value))


def _parent(ctx: Any, value: Any) -> Any:
    try:
        result = yield ctx.start_child("child", value)
    except ChildWorkflowFailedError as exc:
        return {
            "child": exc.child_id,
            "status": exc.status,
            "type": exc.error_type,
            "message": exc.error_message,
        }
    return {"result": result}


def _named_parent(ctx: Any, spec: dict[str, Any]) -> Any:
    try:
        result = yield ctx.start_child(spec["type"], spec.get("input"), id=spec.get("id"))
    except ChildWorkflowFailedError as exc:
        return {"child": exc.child_id, "status": exc.status, "type": exc.error_type}
    return {"result": result}


FAMILY = {
    "child": workflow("child").activities(**ACTIVITIES).execute(_child),
    "parent": workflow("parent").execute(_parent),
    "named_parent": workflow("named_parent").execute(_named_parent),
}


def family(storage_factory: Opener) -> TestEngine:
    te = make_engine(storage_factory, FAMILY)
    mocks(te)
    return te


def test_child_result_is_returned_at_the_parent_yield(storage_factory: Opener) -> None:
    """The parent receives the child's result; the child is a run of its own, with parent_id;
    the next maintenance pass leaves no timer behind."""
    te = family(storage_factory)
    handle = te.start("parent", 7, id="p")
    assert handle.result() == {"result": "a(7)"}
    child_id = "p/00000000"
    child = te.describe(child_id)
    assert (child.status, child.parent_id, child.result) == ("completed", "p", "a(7)")
    assert op_signatures(te.storage, "p") == ["child:child"]
    te.advance(0)
    assert stored_timers(te.storage) == []
    assert handle.result() == {"result": "a(7)"}


def test_child_finishing_inline_drives_the_parent_inline(storage_factory: Opener) -> None:
    """In manual mode, ``start`` drives the parent, the child, and the parent again to its end."""
    te = family(storage_factory)
    handle = te.start("parent", 7, id="p")
    assert handle.result() == {"result": "a(7)"}


def test_child_failure_is_raised_in_the_parent(storage_factory: Opener) -> None:
    """A failed child raises ChildWorkflowFailedError carrying its status, type and message."""
    te = family(storage_factory)
    handle = te.start("parent", "fail", id="p")
    assert handle.result() == {
        "child": "p/00000000",
        "status": "failed",
        "type": "ValueError",
        "message": "child broke",
    }
    with pytest.raises(WorkflowFailedError) as info:
        te.get_handle("p/00000000").result()
    assert (info.value.error_type, info.value.error_message) == ("ValueError", "child broke")


def test_uncaught_child_failure_fails_the_parent(storage_factory: Opener) -> None:
    """Without a handler the child's failure fails the parent with ChildWorkflowFailedError."""

    def strict_parent(ctx: Any, _: Any) -> Any:
        return (yield ctx.start_child("child", "fail", id="kid"))

    te = make_engine(
        storage_factory, {**FAMILY, "strict": workflow("strict").execute(strict_parent)}
    )
    handle = te.start("strict", id="p")
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    assert info.value.error_type == "ChildWorkflowFailedError"
    assert "kid" in info.value.error_message and "child broke" in info.value.error_message


def test_cancelled_child_is_reported_to_the_parent(storage_factory: Opener) -> None:
    """Cancelling a child wakes the parent with ChildWorkflowFailedError, status cancelled."""
    te = family(storage_factory)
    handle = te.start("parent", "wait", id="p")
    te.cancel("p/00000000")
    result = handle.result()
    assert (result["child"], result["status"]) == ("p/00000000", "cancelled")
    assert result["type"] == "WorkflowCancelledError"


def test_child_waiting_for_a_signal_completes_the_parent(storage_factory: Opener) -> None:
    """A child can park; signalling it finishes it, and the parent then gets its result."""
    te = family(storage_factory)
    handle = te.start("parent", "wait", id="p")
    assert te.describe("p/00000000").status == "running"
    te.signal("p/00000000", "release", "freed")
    assert handle.result() == {"result": "freed"}


def test_child_with_an_explicit_id(storage_factory: Opener) -> None:
    """``start_child(id=...)`` names the child run."""
    te = family(storage_factory)
    handle = te.start("named_parent", {"type": "child", "input": 3, "id": "kid-3"}, id="p")
    assert handle.result() == {"result": "a(3)"}
    assert te.describe("kid-3").parent_id == "p"


def test_child_of_unknown_type_fails_at_the_parent_yield(storage_factory: Opener) -> None:
    """An unregistered child type raises ChildWorkflowFailedError (status not-started)."""
    te = family(storage_factory)
    handle = te.start("named_parent", {"type": "ghost"}, id="p")
    assert handle.result() == {
        "child": "p/00000000",
        "status": "not-started",
        "type": "UnknownWorkflowTypeError",
    }


def test_child_id_taken_fails_at_the_parent_yield(storage_factory: Opener) -> None:
    """A child id already used raises ChildWorkflowFailedError (WorkflowAlreadyExistsError)."""
    te = family(storage_factory)
    te.start("child", 1, id="taken")
    handle = te.start("named_parent", {"type": "child", "input": 2, "id": "taken"}, id="p")
    assert handle.result() == {
        "child": "taken",
        "status": "not-started",
        "type": "WorkflowAlreadyExistsError",
    }
    assert calls(te)["a"] == 1


@pytest.mark.parametrize("when", ["before", "after"])
def test_child_is_started_once_across_a_crash(storage_factory: Opener, when: str) -> None:
    """A crash just before or after the child's start is written neither loses nor duplicates
    the child."""
    reference = WriteLog(storage_factory())
    te = TestEngine(FAMILY, storage=reference)
    mocks(te)
    te.start("parent", 5, id="ref")
    assert te.get_handle("ref").result() == {"result": "a(5)"}
    child_start = reference.write_putting(keys.state_key("ref/00000000"))

    option = "crash_before_write" if when == "before" else "crash_after_write"
    store = CrashingStorage(storage_factory(), **{option: child_start})
    te = TestEngine(FAMILY, storage=store)
    mocks(te)
    with pytest.raises(SimulatedCrash):
        te.start("parent", 5, id="p")
    child_stored = store.get(keys.state_key("p/00000000")) is not None
    assert child_stored is (when == "after")
    te.crash()
    te.recover(storage=storage_factory())
    assert te.get_handle("p").result() == {"result": "a(5)"}
    children = sorted(row.id for row in te.list(workflow_type="child"))
    assert children == ["p/00000000", "ref/00000000"]
    assert calls(te)["a"] == 1


def test_children_in_all_run_side_by_side(storage_factory: Opener) -> None:
    """Two children in ``all`` both run; the parent gets both results in order."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(ctx.start_child("child", 1), ctx.start_child("child", 2)))

    te = make_engine(storage_factory, {**FAMILY, "fan": workflow("fan").execute(body)})
    mocks(te)
    handle = te.start("fan", id="f")
    assert handle.result() == ["a(1)", "a(2)"]
    assert sorted(row.id for row in te.list(workflow_type="child")) == [
        "f/00000000.000",
        "f/00000000.001",
    ]


def test_all_with_two_waits_for_one_name_takes_two_signals_in_order(
    storage_factory: Opener,
) -> None:
    """Two waits on one name inside ``all`` each consume their own signal, oldest first."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(ctx.wait_for_signal("x"), ctx.wait_for_signal("x")))

    te = make_engine(storage_factory, define("w", body))
    handle = te.start("w", id="w")
    te.signal("w", "x", "first")
    assert te.describe("w").status == "running"
    assert buffered_signals(te.storage, "w") == []
    te.signal("w", "x", "second")
    assert handle.result() == ["first", "second"]
