"""A run's event log (``Engine.events``): its stored records read back as ordered events.

Rules pinned here (docs/decisions/0032-events.md): every kind of fact a run records comes
back as a typed event in the order it happened, with ids that are the same on every read and
on a fresh engine, so ``after=`` pages through them; reading the log writes nothing, and a
run's steps write nothing for it.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import T0, Opener, make_engine, recover_fresh

from weft_serverless import (
    InvalidArgumentError,
    RetryPolicy,
    WorkflowNotFoundError,
    workflow,
)


def _child(ctx: Any, x: int) -> Any:
    return x + 1
    yield


def _parent(ctx: Any, x: int) -> Any:
    items: list[str] = []
    ctx.on_update("add", lambda item: items.append(item) or len(items))
    a = yield ctx.run("flaky", x, retry=RetryPolicy(max_attempts=3, initial_backoff=1))
    yield ctx.sleep(5)
    s = yield ctx.wait_for_signal("go")
    c = yield ctx.start_child("child", 1, id="kid")
    return [a, s, c, items]


def _workflows() -> dict[str, Any]:
    calls = {"n": 0}

    def flaky(x: int) -> int:
        calls["n"] += 1
        if calls["n"] < 2:
            raise ValueError("boom")
        return x * 2

    return {
        "parent": workflow("parent").activities(flaky=flaky).execute(_parent),
        "child": workflow("child").execute(_child),
    }


def _run_to_end(storage_factory: Opener) -> Any:
    te = make_engine(storage_factory, _workflows())
    te.start("parent", 3, id="p1")
    te.advance(1)  # the retry
    te.advance(5)  # the sleep
    te.engine.update("p1", "add", "z")
    te.signal("p1", "go", 7)
    te.advance(0)
    assert te.engine.get_handle("p1").result() == [6, 7, 2, ["z"]]
    return te


def test_every_recorded_fact_is_an_event_in_order(storage_factory: Opener) -> None:
    te = _run_to_end(storage_factory)
    events = te.engine.events("p1")
    assert [event["type"] for event in events] == [
        "run.started",
        "activity.attempt_failed",
        "step.completed",
        "timer.fired",
        "update.applied",
        "signal.received",
        "child.completed",
        "run.completed",
    ]
    assert [event["at"] for event in events] == [T0, T0, T0 + 1, *[T0 + 6] * 5]
    failed = events[1]
    assert failed["attempt"] == 1 and failed["activity"] == "flaky"
    traceback = failed["error"].pop("traceback")
    assert failed["error"] == {"type": "ValueError", "message": "boom"}
    assert traceback.endswith('raise ValueError("boom")\nValueError: boom\n')
    assert failed["retry_at"] == T0 + 1
    assert events[2]["attempt"] == 2 and events[2]["operation"] == "run:flaky"
    assert events[4]["name"] == "add"
    assert events[6]["child_id"] == "kid"
    assert events[7]["status"] == "completed"
    assert {event["workflow_id"] for event in events} == {"p1"}
    assert {event["workflow_type"] for event in events} == {"parent"}
    ids = [event["event_id"] for event in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_ids_are_stable_across_reads_and_engines(storage_factory: Opener) -> None:
    te = _run_to_end(storage_factory)
    first = te.engine.events("p1")
    again = te.engine.events("p1")
    fresh = recover_fresh(te, storage_factory).events("p1")
    assert first == again == fresh


def test_after_pages_through_the_log(storage_factory: Opener) -> None:
    te = _run_to_end(storage_factory)
    everything = te.engine.events("p1")
    pages: list[dict[str, Any]] = []
    after = None
    while True:
        page = te.engine.events("p1", after=after, limit=3)
        if not page:
            break
        pages += page
        after = page[-1]["event_id"]
    assert pages == everything
    assert te.engine.events("p1", after=everything[-1]["event_id"]) == []


def test_a_running_run_shows_what_happened_so_far(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows())
    te.start("parent", 3, id="p1")
    assert [e["type"] for e in te.engine.events("p1")] == [
        "run.started",
        "activity.attempt_failed",
    ]
    te.engine.cancel("p1")
    events = te.engine.events("p1")
    assert events[-1]["type"] == "run.cancelled"
    assert events[-1]["status"] == "cancelled"


def test_reading_the_log_writes_nothing(storage_factory: Opener) -> None:
    te = _run_to_end(storage_factory)
    before = te.storage.stats.snapshot()
    te.engine.events("p1")
    after = te.storage.stats.snapshot()
    assert after["batches"] == before["batches"]
    assert after["conditional_batches"] == before["conditional_batches"]
    assert after["scans"] == before["scans"] + 1  # one range read of the run's partition


@pytest.mark.backends("memory")
def test_bad_arguments_are_typed_errors(storage_factory: Opener) -> None:
    te = _run_to_end(storage_factory)
    with pytest.raises(WorkflowNotFoundError):
        te.engine.events("nope")
    for bad in (0, 1001, True, "3"):
        with pytest.raises(InvalidArgumentError):
            te.engine.events("p1", limit=bad)
    with pytest.raises(InvalidArgumentError):
        te.engine.events("p1", after="")
