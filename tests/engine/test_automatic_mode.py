"""``background_tasks="automatic"``: a background driver runs woken workflows in-process.

These tests wait for a *result* (``handle.result(timeout=5)``), never for a timer, and do not
sleep: the waits end as soon as the background driver finishes the run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from engine_helpers import Opener

from weft_serverless import Engine, WorkflowFailedError, workflow


def _double(x: int) -> int:
    return x * 2


def _steps(ctx: Any, value: int) -> Any:
    first = yield ctx.run("double", value)
    second = yield ctx.run("double", first)
    return second


def _waiter(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("go"))


def _child(ctx: Any, value: int) -> Any:
    if value < 0:
        raise ValueError("negative")
    return (yield ctx.run("double", value))


def _parent(ctx: Any, value: int) -> Any:
    return (yield ctx.start_child("child", value))


WORKFLOWS = {
    "steps": workflow("steps").activities(double=_double).execute(_steps),
    "waiter": workflow("waiter").execute(_waiter),
    "child": workflow("child").activities(double=_double).execute(_child),
    "parent": workflow("parent").execute(_parent),
}


@pytest.fixture
def engine(storage_factory: Opener) -> Iterator[Engine]:
    with Engine.create(storage_factory(), WORKFLOWS, background_tasks="automatic") as running:
        yield running


def test_started_run_finishes_in_the_background(storage_factory: Opener) -> None:
    """``start`` returns at once; the background driver runs the steps; ``result`` waits."""
    gate, seen = threading.Event(), []

    def gated(x: int) -> int:
        seen.append((threading.current_thread().name, gate.wait(5)))
        return x * 2

    with Engine.create(
        storage_factory(), WORKFLOWS, background_tasks="automatic", activities={"double": gated}
    ) as engine:
        handle = engine.start("steps", 3, id="s")
        gate.set()  # an inline drive would have blocked start() on the gate until it timed out
        assert handle.result(timeout=5) == 12
        assert engine.describe("s").status == "completed"
    assert seen == [("weft-background", True), ("weft-background", True)]


def test_signal_wakes_a_parked_run_in_the_background(engine: Engine) -> None:
    """A run parked on a signal is driven by the background driver once the signal arrives."""
    handle = engine.start("waiter", id="w")
    engine.signal("w", "go", {"ok": True})
    assert handle.result(timeout=5) == {"ok": True}


def test_child_completion_wakes_the_parent_in_the_background(engine: Engine) -> None:
    """The child's completion (a due-now timer) is fired by the background driver, which then
    finishes the parent; a failing child fails its parent the same way."""
    assert engine.start("parent", 5, id="p").result(timeout=5) == 10
    failing = engine.start("parent", -1, id="p-bad")
    with pytest.raises(WorkflowFailedError) as info:
        failing.result(timeout=5)
    assert info.value.error_type == "ChildWorkflowFailedError"
