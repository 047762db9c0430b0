"""Run lifecycle: idempotent start, duplicate ids, cancel, ``list`` filters, ``describe`` fields."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import T0, Opener, advance_to, make_engine, stored_timers

from weft_serverless import (
    InvalidArgumentError,
    WorkflowAlreadyExistsError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    workflow,
)
from weft_serverless.testing import CrashingStorage, TestEngine


def _noop(value: Any = None) -> Any:
    return value


def _pipeline(ctx: Any, value: Any) -> Any:
    first = yield ctx.run("a", value)
    yield ctx.sleep("10s")
    return (yield ctx.run("b", first))


def _quick(ctx: Any, value: Any) -> Any:
    if value == "fail":
        raise RuntimeError("quick failed")
    return (yield ctx.run("a", value))


def _waiter(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("go"))


WORKFLOWS = {
    "pipeline": workflow("pipeline", version="3").activities(a=_noop, b=_noop).execute(_pipeline),
    "quick": workflow("quick").activities(a=_noop).execute(_quick),
    "waiter": workflow("waiter").execute(_waiter),
}


def engine(storage_factory: Opener, **options: Any) -> TestEngine:
    te = make_engine(storage_factory, WORKFLOWS, **options)
    te.mock("a", impl=lambda x: f"a({x})")
    te.mock("b", impl=lambda x: f"b({x})")
    return te


# -- start -----------------------------------------------------------------------------------


def test_start_drives_the_run_inline_until_it_parks_or_finishes(storage_factory: Opener) -> None:
    """Manual mode: ``start`` returns with the run finished, or parked at its first wait."""
    te = engine(storage_factory)
    assert te.start("quick", 1, id="q").describe().status == "completed"
    handle = te.start("pipeline", 1, id="p")
    assert te.mocks["a"].calls == [1, 1]
    assert te.mocks["b"].calls == []
    assert handle.describe().status == "running"


def test_start_without_an_id_generates_a_unique_one(storage_factory: Opener) -> None:
    """Two starts without ids create two distinct runs."""
    te = engine(storage_factory)
    first, second = te.start("quick", 1), te.start("quick", 2)
    assert first.id != second.id
    assert (first.result(), second.result()) == ("a(1)", "a(2)")


def test_repeated_start_with_the_same_idempotency_key_returns_the_same_run(
    storage_factory: Opener,
) -> None:
    """Same key: the same run comes back, nothing new is started or run."""
    te = engine(storage_factory)
    first = te.start("pipeline", 1, id="order-1", idempotency_key="k-1")
    again = te.start("pipeline", 1, id="order-1", idempotency_key="k-1")
    assert again.id == first.id == "order-1"
    assert te.mocks["a"].call_count == 1
    assert [row.id for row in te.list()] == ["order-1"]


def test_idempotency_key_wins_over_a_new_id(storage_factory: Opener) -> None:
    """A repeated key returns the original run even when the retry carries another (or no) id."""
    te = engine(storage_factory)
    first = te.start("quick", 1, idempotency_key="k-1")
    assert te.start("quick", 1, idempotency_key="k-1").id == first.id
    assert te.start("quick", 1, id="other", idempotency_key="k-1").id == first.id
    with pytest.raises(WorkflowNotFoundError):
        te.describe("other")
    assert te.mocks["a"].call_count == 1


def test_idempotent_start_returns_a_finished_run_and_its_result(storage_factory: Opener) -> None:
    """A key repeated after the run finished returns it, result intact, without re-running it."""
    te = engine(storage_factory)
    te.start("quick", 5, id="q", idempotency_key="k")
    te.clock.advance(100)
    again = te.start("quick", 5, id="q", idempotency_key="k")
    assert again.result() == "a(5)"
    assert te.mocks["a"].call_count == 1


def test_idempotency_key_survives_a_restart(storage_factory: Opener) -> None:
    """After a crash, a fresh engine still maps the key to the original run."""
    te = engine(storage_factory)
    te.start("pipeline", 1, id="p", idempotency_key="k")
    te.crash()
    te.recover(storage=storage_factory())
    assert te.start("pipeline", 1, id="p", idempotency_key="k").id == "p"
    assert te.mocks["a"].call_count == 1


def test_repeated_id_without_a_key_raises_already_exists(storage_factory: Opener) -> None:
    """Reusing an id without an idempotency key raises and leaves the first run untouched."""
    store = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=store)
    te.mock("a", impl=lambda x: f"a({x})")
    te.start("quick", 1, id="q")
    before = te.describe("q")
    writes = store.writes
    with pytest.raises(WorkflowAlreadyExistsError) as info:
        te.start("quick", 2, id="q")
    assert info.value.code == "WorkflowAlreadyExistsError"
    assert info.value.workflow_id == "q"
    assert "idempotency_key" in str(info.value)
    assert te.describe("q") == before
    assert store.writes == writes + 1  # the refused conditional start, nothing applied
    assert te.mocks["a"].call_count == 1


def test_repeated_id_with_a_different_key_raises_already_exists(storage_factory: Opener) -> None:
    """Another key does not give access to an existing id."""
    te = engine(storage_factory)
    te.start("quick", 1, id="q", idempotency_key="k-1")
    with pytest.raises(WorkflowAlreadyExistsError):
        te.start("quick", 1, id="q", idempotency_key="k-2")
    with pytest.raises(WorkflowAlreadyExistsError):
        te.start("quick", 1, id="q")


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_stops_a_parked_run(storage_factory: Opener) -> None:
    """A cancelled run ends ``cancelled``; its result raises; its timer runs nothing more."""
    te = engine(storage_factory)
    handle = te.start("pipeline", 1, id="p")
    handle.cancel()
    assert te.describe("p").status == "cancelled"
    with pytest.raises(WorkflowCancelledError) as info:
        handle.result()
    assert info.value.code == "WorkflowCancelledError"
    assert info.value.workflow_id == "p"
    advance_to(te, T0 + 10)
    assert te.mocks["b"].call_count == 0
    assert te.describe("p").status == "cancelled"
    assert stored_timers(te.storage) == []
    assert [row.id for row in te.list(status="cancelled")] == ["p"]
    assert te.list(status="running") == []


def test_cancelled_run_refuses_signals(storage_factory: Opener) -> None:
    """A signal to a cancelled run raises WorkflowNotRunningError naming the status."""
    te = engine(storage_factory)
    te.start("waiter", id="w")
    te.cancel("w")
    with pytest.raises(WorkflowNotRunningError) as info:
        te.signal("w", "go", 1)
    assert info.value.status == "cancelled"


def test_cancel_is_idempotent_and_survives_a_restart(storage_factory: Opener) -> None:
    """Cancelling twice is harmless; a fresh engine does not resume a cancelled run."""
    te = engine(storage_factory)
    te.start("pipeline", 1, id="p")
    te.cancel("p")
    te.cancel("p")
    te.crash()
    te.recover(storage=storage_factory())
    advance_to(te, T0 + 10)
    assert te.describe("p").status == "cancelled"
    assert te.mocks["b"].call_count == 0


def test_cancel_of_a_finished_run_keeps_its_outcome(storage_factory: Opener) -> None:
    """Cancelling a completed run does not change its status or its result."""
    te = engine(storage_factory)
    te.start("quick", 1, id="q")
    te.cancel("q")
    assert te.describe("q").status == "completed"
    assert te.get_handle("q").result() == "a(1)"


def test_cancel_of_an_unknown_run_raises_not_found(storage_factory: Opener) -> None:
    """Cancel of an id never started raises WorkflowNotFoundError."""
    te = engine(storage_factory)
    with pytest.raises(WorkflowNotFoundError) as info:
        te.cancel("ghost")
    assert info.value.code == "WorkflowNotFoundError"


# -- list and describe -----------------------------------------------------------------------


def populate(te: TestEngine) -> None:
    """q1 completed, p running, q2 failed, w running; one virtual second apart."""
    te.start("quick", 1, id="q1")
    te.clock.advance(1)
    te.start("pipeline", 1, id="p")
    te.clock.advance(1)
    te.start("quick", "fail", id="q2")
    te.clock.advance(1)
    te.start("waiter", id="w")


def test_list_filters_by_status_and_type_oldest_first(storage_factory: Opener) -> None:
    """``list`` filters by status, by type, by both, and caps with ``limit``."""
    te = engine(storage_factory)
    populate(te)
    assert [row.id for row in te.list()] == ["q1", "p", "q2", "w"]
    assert [row.id for row in te.list(status="running")] == ["p", "w"]
    assert [row.id for row in te.list(status="completed")] == ["q1"]
    assert [row.id for row in te.list(status="failed")] == ["q2"]
    assert te.list(status="cancelled") == []
    assert [row.id for row in te.list(workflow_type="quick")] == ["q1", "q2"]
    assert [row.id for row in te.list(status="failed", workflow_type="quick")] == ["q2"]
    assert te.list(status="running", workflow_type="quick") == []
    assert [row.id for row in te.list(limit=2)] == ["q1", "p"]
    rows = {row.id: row for row in te.list()}
    assert (rows["p"].workflow_type, rows["p"].status, rows["p"].created_at) == (
        "pipeline",
        "running",
        T0 + 1,
    )


def test_list_follows_status_changes(storage_factory: Opener) -> None:
    """A run leaves ``running`` and appears under its new status when it finishes."""
    te = engine(storage_factory)
    populate(te)
    advance_to(te, T0 + 11)
    te.signal("w", "go", "x")
    assert te.list(status="running") == []
    assert [row.id for row in te.list(status="completed")] == ["q1", "p", "w"]


@pytest.mark.parametrize(
    "filters",
    [{"status": "done"}, {"status": "RUNNING"}, {"limit": 0}, {"limit": -1}],
    ids=["unknown-status", "wrong-case", "zero-limit", "negative-limit"],
)
def test_list_rejects_bad_filters(storage_factory: Opener, filters: dict[str, Any]) -> None:
    """An unknown status or a limit below 1 is an InvalidArgumentError."""
    te = engine(storage_factory)
    with pytest.raises(InvalidArgumentError):
        te.list(**filters)


def test_describe_reports_every_field(storage_factory: Opener) -> None:
    """``describe`` of a running, completed and failed run: id, type, version, status, times,
    result, error, parent."""
    te = engine(storage_factory)
    populate(te)
    running = te.describe("p")
    assert (running.id, running.workflow_type, running.version, running.status) == (
        "p",
        "pipeline",
        "3",
        "running",
    )
    assert (running.created_at, running.updated_at) == (T0 + 1, T0 + 1)
    assert (running.result, running.error, running.parent_id) == (None, None, None)
    assert not running.is_terminal

    advance_to(te, T0 + 11)
    done = te.describe("p")
    assert (done.status, done.result, done.error) == ("completed", "b(a(1))", None)
    assert (done.created_at, done.updated_at) == (T0 + 1, T0 + 11)
    assert done.is_terminal
    assert te.get_handle("p").describe() == done

    failed = te.describe("q2")
    assert (failed.status, failed.result, failed.version) == ("failed", None, "1")
    assert failed.error is not None
    assert (failed.error["type"], failed.error["message"]) == ("RuntimeError", "quick failed")


def test_describe_of_an_unknown_run_raises_not_found(storage_factory: Opener) -> None:
    """``describe`` and ``result`` of an id never started raise WorkflowNotFoundError."""
    te = engine(storage_factory)
    with pytest.raises(WorkflowNotFoundError):
        te.describe("ghost")
    with pytest.raises(WorkflowNotFoundError):
        te.get_handle("ghost").result()


def test_failed_run_result_carries_the_remote_error(storage_factory: Opener) -> None:
    """``result()`` of a failed run raises WorkflowFailedError with the error type and message."""
    te = engine(storage_factory)
    handle = te.start("quick", "fail", id="q")
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    error = info.value
    assert (error.code, error.workflow_id) == ("WorkflowFailedError", "q")
    assert (error.error_type, error.error_message) == ("RuntimeError", "quick failed")
    assert "RuntimeError: quick failed" in str(error)


@pytest.mark.parametrize("wf_id", ["order#7", "ünïcødé", "a/b c", "100%", "x" * 256])
def test_ids_with_separators_and_unicode_work_end_to_end(
    storage_factory: Opener, wf_id: str
) -> None:
    """Ids with key separators, escapes, unicode or the maximum length start, park, list,
    resume by timer, describe and deduplicate like any other."""
    te = engine(storage_factory)
    handle = te.start("pipeline", 1, id=wf_id, idempotency_key=f"key#{wf_id[:252]}")
    assert [row.id for row in te.list(status="running")] == [wf_id]
    assert te.start("pipeline", 1, id=wf_id, idempotency_key=f"key#{wf_id[:252]}").id == wf_id
    advance_to(te, T0 + 10)
    assert handle.result() == "b(a(1))"
    assert te.describe(wf_id).id == wf_id
    assert [row.id for row in te.list(status="completed")] == [wf_id]
