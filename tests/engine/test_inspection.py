"""The operator read model (``inspect_workflow``, ``read_history``, ``read_owner``, ...).

Upper layers (the CLI, the API, ``weft dev``) read a run through these public names and get
decoded values: a step's kind as a word, an owner and its epoch. The store's keys and record
encoding stay inside the engine.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from engine_helpers import T0, Opener

from weft_serverless import (
    ConfigurationError,
    WorkflowDefinition,
    WorkflowNotFoundError,
    inspect_workflow,
    read_history,
    read_only_engine,
    read_owner,
    stored_ownership_mode,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine


def _nap(ctx: Any, _: Any) -> Generator[Any, Any, str]:
    yield ctx.sleep("1h")
    got = yield ctx.wait_for_signal("go", timeout="10m")
    return f"rested {got}"


NAP: dict[str, WorkflowDefinition] = {"nap": workflow("nap").execute(_nap)}


def _everything(storage: Any) -> list[tuple[str, str, bytes]]:
    """Every record of the test's workflow and of the store's meta partition."""
    return [
        (partition, sort, value)
        for partition in (keys.workflow_partition("nap-1"), keys.META_PARTITION)
        for sort, value in storage.scan(partition)
    ]


def test_parked_timers_read_as_words_with_their_due_times(storage_factory: Opener) -> None:
    te = TestEngine(NAP, storage=storage_factory())
    te.start("nap", id="nap-1")

    step = inspect_workflow(te.engine, "nap-1").history.steps[0]
    assert (step.step, step.status, step.timer, step.due_at) == ("1", "waiting", "sleep", T0 + 3600)
    assert (step.index, step.branch, step.committed) == (0, False, False)

    te.advance(3600)
    history = read_history(te.storage, "nap-1")
    assert history is not None
    slept, waiting = history.steps
    assert (slept.operation, slept.status, slept.committed) == ("sleep", "ok", True)
    assert (waiting.step, waiting.timer, waiting.detail) == (
        "2",
        "signal wait (timeout)",
        waiting.timer,
    )
    assert history.status == "running" and history.failed_attempts == ()


def test_buffered_signals_are_counted_by_name(storage_factory: Opener) -> None:
    te = TestEngine(NAP, storage=storage_factory())
    te.start("nap", id="nap-1")
    te.signal("nap-1", "go", 1)
    te.signal("nap-1", "go", 2)
    history = read_history(te.storage, "nap-1")
    assert history is not None and dict(history.buffered_signals) == {"go": 2}


def _parent(ctx: Any, _: Any) -> Generator[Any, Any, str]:
    result: str = yield ctx.start_child("nap", id="nap-kid")
    return result


def test_a_child_step_names_its_child_parked_and_committed(storage_factory: Opener) -> None:
    te = TestEngine(
        {**NAP, "parent": workflow("parent").execute(_parent)}, storage=storage_factory()
    )
    te.start("parent", id="mum")
    parked = inspect_workflow(te.engine, "mum").history.steps[0]
    assert (parked.operation, parked.status, parked.child_id) == ("child", "waiting", "nap-kid")
    te.advance(3600)
    te.signal("nap-kid", "go", 1)
    te.advance(1)
    done = inspect_workflow(te.engine, "mum").history.steps[0]
    assert (done.operation, done.status, done.child_id) == ("child:nap", "ok", "nap-kid")
    assert "child_id" not in done.as_json()  # ``weft show --json`` prints what it printed


def test_owner_and_epoch_under_workflow_lease(storage_factory: Opener) -> None:
    storage = storage_factory()
    if not storage.capabilities().conditional_batch:
        pytest.skip("workflow-lease needs conditional batches")
    te = TestEngine(NAP, storage=storage, ownership="workflow-lease")
    with te.engine.invocation(time_left=lambda: 60.0):
        te.start("nap", id="nap-1")
        owner = read_owner(storage, "nap-1")
        assert owner is not None and owner.epoch == 1
        assert owner.holder is not None
        assert (owner.holder.engine_id, owner.holder.epoch) == (te.engine.runtime.engine_id, 1)
    released = inspect_workflow(te.engine, "nap-1").owner
    assert released is not None and released.as_json() == {"holder": None, "epoch": 1}
    assert stored_ownership_mode(storage) == "workflow-lease"


def test_a_store_without_owners_has_none(storage_factory: Opener) -> None:
    te = TestEngine(NAP, storage=storage_factory())
    te.start("nap", id="nap-1")
    assert read_owner(te.storage, "nap-1") is None
    assert stored_ownership_mode(te.storage) == "none"
    with pytest.raises(WorkflowNotFoundError):
        inspect_workflow(te.engine, "nope")
    assert read_history(te.storage, "nope") is None


def test_the_read_only_engine_reads_and_writes_nothing(storage_factory: Opener) -> None:
    te = TestEngine(NAP, storage=storage_factory())
    te.start("nap", id="nap-1")
    before = _everything(te.storage)

    reader = read_only_engine(storage_factory(), "reader")
    try:
        assert reader.describe("nap-1").status == "running"
        assert inspect_workflow(reader, "nap-1").history.steps[0].timer == "sleep"
        with pytest.raises(ConfigurationError):
            reader.cancel("nap-1")
    finally:
        reader.close()
    assert _everything(te.storage) == before


def test_the_read_only_engine_describes_the_owner_as_the_stores_engines_do(
    storage_factory: Opener,
) -> None:
    """``describe(id).owner`` is the run's claim under workflow-lease; a reader (the CLI, the
    console) reads the same record, so its describe matches the API's."""
    storage = storage_factory()
    if not storage.capabilities().conditional_batch:
        pytest.skip("workflow-lease needs conditional batches")
    te = TestEngine(NAP, storage=storage, ownership="workflow-lease")
    reader = read_only_engine(storage_factory(), "reader")
    try:
        with te.engine.invocation(time_left=lambda: 60.0):
            te.start("nap", id="nap-1")
            held = te.engine.describe("nap-1").owner
            assert held is not None and held["engine_id"] == te.engine.runtime.engine_id
            assert reader.describe("nap-1").owner == held
        assert te.engine.describe("nap-1").owner is None
        assert reader.describe("nap-1").owner is None  # released at the invocation's end
    finally:
        reader.close()
