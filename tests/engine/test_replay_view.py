"""What a run waits for and what its steps were given (``waiting_for``, ``replay_view``).

A signal wait without a timeout leaves no record, and update and query handlers live in the
code: only a read-only replay of the run's history knows them. These tests pin what it
finds (nested branches included), that it writes nothing, and what is known without the
code (outputs, buffered signals) on an engine that does not register the type.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from engine_helpers import Opener

from weft_serverless import (
    Waiting,
    WorkflowDefinition,
    WorkflowNotFoundError,
    read_only_engine,
    replay_view,
    waiting_for,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

pytestmark = pytest.mark.backends("memory", "sqlite")


def _desk(ctx: Any, order: dict[str, Any]) -> Generator[Any, Any, Any]:
    notes: list[str] = []
    ctx.on_update("note", lambda text: notes.append(text) or len(notes))
    ctx.on_query("notes", lambda _: list(notes))
    priced = yield ctx.run("price", order)
    verdict = yield ctx.race(
        ctx.wait_for_signal("approve"), ctx.wait_for_signal("reject"), ctx.sleep("1h")
    )
    ctx.on_query("verdict", lambda _: verdict)
    return {"priced": priced, "verdict": verdict}


def _nested(ctx: Any, _: Any) -> Generator[Any, Any, Any]:
    got = yield ctx.all(
        ctx.wait_for_signal("a"),
        ctx.all(ctx.wait_for_signal("b"), ctx.run("price", {"sku": "s-2"})),
    )
    return got


WORKFLOWS: dict[str, WorkflowDefinition] = {
    "desk": workflow("desk").activities(price=lambda order: order["qty"] * 3).execute(_desk),
    "nested": workflow("nested").activities(price=lambda _: 1).execute(_nested),
}
FIRST, SECOND = keys.step_slot(0), keys.step_slot(1)


def _partition(te: TestEngine, workflow_id: str) -> list[tuple[str, bytes]]:
    return list(te.storage.scan(keys.workflow_partition(workflow_id)))


def test_a_parked_run_waits_for_its_race_signals_updates_and_queries(
    storage_factory: Opener,
) -> None:
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    te.start("desk", {"qty": 2}, id="d1")
    before = _partition(te, "d1")
    assert waiting_for(te.engine, "d1") == Waiting(("approve", "reject"), ("note",), ("notes",))
    view = replay_view(te.engine, "d1")
    assert (view.status, view.replayed) == ("running", True)
    assert view.inputs == {FIRST: {"qty": 2}}
    assert view.outputs == {FIRST: 6}
    assert _partition(te, "d1") == before  # a replay writes nothing


def test_an_unfinished_branch_of_a_nested_all_is_what_it_waits_for(
    storage_factory: Opener,
) -> None:
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    te.start("nested", None, id="n1")
    assert waiting_for(te.engine, "n1") == Waiting(("a", "b"), (), ())
    te.engine.signal("n1", "a", {"first": True})
    assert waiting_for(te.engine, "n1") == Waiting(("b",), (), ())
    view = replay_view(te.engine, "n1")
    branch_a, inner_run = (
        keys.branch_slot(FIRST, 0),
        keys.branch_slot(keys.branch_slot(FIRST, 1), 1),
    )
    assert view.outputs[branch_a] == {"first": True}  # a received signal's payload
    assert view.inputs == {inner_run: {"sku": "s-2"}}


def test_a_suspended_run_still_says_what_it_waits_for_and_a_finished_one_nothing(
    storage_factory: Opener,
) -> None:
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    te.start("desk", {"qty": 1}, id="d1")
    te.engine.suspend("d1")
    assert waiting_for(te.engine, "d1") == Waiting(("approve", "reject"), ("note",), ("notes",))
    te.engine.resume("d1")
    te.engine.signal("d1", "approve", {"by": "ada"})
    assert te.engine.describe("d1").status == "completed"
    assert waiting_for(te.engine, "d1") is None
    view = replay_view(te.engine, "d1")
    assert view.waiting is None and view.replayed
    assert view.outputs[SECOND] == {"by": "ada"}  # the race winner's value: the payload


def test_signals_buffered_for_a_later_wait_are_listed_with_their_payloads(
    storage_factory: Opener,
) -> None:
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    te.start("nested", None, id="n1")
    te.engine.signal("n1", "zz", 1)
    te.engine.signal("n1", "zz", {"two": 2})
    assert replay_view(te.engine, "n1").buffered == (("zz", 1), ("zz", {"two": 2}))


def test_without_the_code_only_the_stored_values_are_known(storage_factory: Opener) -> None:
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    te.start("desk", {"qty": 2}, id="d1")
    reader = read_only_engine(te.storage, "reader")
    assert waiting_for(reader, "d1") is None
    view = replay_view(reader, "d1")
    assert (view.replayed, view.waiting, view.inputs, view.outputs) == (False, None, {}, {FIRST: 6})
    with pytest.raises(WorkflowNotFoundError):
        replay_view(reader, "nope")
    with pytest.raises(WorkflowNotFoundError):
        waiting_for(te.engine, "nope")
