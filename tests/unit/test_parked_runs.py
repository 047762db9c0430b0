"""The per-engine cache of parked generators: bounded, and closing what it drops."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from weft_serverless import workflow
from weft_serverless.commands import Sleep
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.process.parked_runs import ParkedRun, ParkedRuns

DEFINITION = workflow("noop").execute(lambda ctx, _: (yield ctx.sleep(1)))


def _parked(closed: list[str], name: str, *, fail: bool = False) -> ParkedRun:
    def body() -> Generator[Any, Any, None]:
        try:
            yield None
        finally:
            closed.append(name)
            if fail:
                raise ValueError("cleanup failed")

    gen = body()
    next(gen)
    ctx = WorkflowContext(name, DEFINITION, lambda: 0.0)
    return ParkedRun(gen, ctx, Sleep(1.0), 1, DEFINITION, (name,))


def test_the_least_recently_parked_run_is_evicted_and_closed() -> None:
    closed: list[str] = []
    runs = ParkedRuns(capacity=2)
    for name in ("a", "b", "c"):
        runs.keep(name, _parked(closed, name))
    assert closed == ["a"] and len(runs) == 2
    assert runs.take("a") is None
    taken = runs.take("b")
    assert taken is not None and runs.take("b") is None  # taking removes it
    runs.clear()
    assert closed == ["a", "c"] and len(runs) == 0


def test_an_error_in_a_finally_block_at_eviction_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed: list[str] = []
    runs = ParkedRuns(capacity=1)
    runs.keep("a", _parked(closed, "a", fail=True))
    runs.keep("b", _parked(closed, "b"))  # evicts "a" inside another workflow's park
    assert closed == ["a"]
    assert "raised ValueError in a finally block" in caplog.text
