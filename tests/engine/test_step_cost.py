"""A step's in-memory work does not grow with the run's history.

The scan for a finishing step's stale timers walks the run's pending facts and retry records;
an entry left behind for every plain step made that scan, and so a long run, quadratic.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from weft_serverless import workflow
from weft_serverless.engine import timers as steps
from weft_serverless.engine.records import History
from weft_serverless.testing import TestEngine


def _count(x: int) -> int:
    return x


def _many(ctx: Any, n: int) -> Generator[Any, Any, int]:
    for i in range(n):
        yield ctx.run("count", i)
    return n


def test_the_stale_timer_scan_of_a_step_does_not_grow_with_the_steps_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scanned: list[int] = []
    real = steps.stale_timer_deletes

    def counting(history: History, slot: str, now: float) -> Any:
        scanned.append(len(history.pending) + len(history.attempts))
        return real(history, slot, now)

    monkeypatch.setattr(steps, "stale_timer_deletes", counting)
    te = TestEngine({"many": workflow("many").activities(count=_count).execute(_many)})
    assert te.start("many", 200, id="m").result() == 200
    assert len(scanned) == 200
    assert max(scanned) == 0
