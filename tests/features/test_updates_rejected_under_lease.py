"""Under workflow-lease a rejected update writes nothing: not even the claim it would need."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from feature_support import Opener, WriteCount, snapshot

from weft_serverless import (
    Engine,
    UpdateFailedError,
    UpdateValidationError,
    WorkflowContext,
    workflow,
)
from weft_serverless.testing import VirtualClock


def _counter(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, int]:
    state = {"n": 0}

    def add(amount: int) -> int:
        if amount == 13:
            raise ValueError("unlucky")
        state["n"] += amount
        return state["n"]

    def positive(amount: Any) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise UpdateValidationError([{"message": "must be a positive int", "path": []}])

    ctx.on_update("add", add, validator=positive)
    yield ctx.wait_until(lambda: state["n"] >= 10)
    return state["n"]


COUNTER = workflow("counter").execute(_counter)


@pytest.mark.parametrize(
    ("payload", "error"), [(-1, UpdateValidationError), (13, UpdateFailedError)]
)
def test_a_rejected_update_takes_no_claim_and_writes_nothing(
    storage_factory: Opener, payload: int, error: type[Exception]
) -> None:
    """The validator and handler are tried on a read-only replay first; a rejection leaves
    the store untouched (no claim, no epoch bump); an accepted update then applies."""
    storage = storage_factory()
    engine = Engine.create(
        storage,
        {"counter": COUNTER},
        ownership="workflow-lease",
        background_tasks="manual",
        clock=VirtualClock(),
        engine_id="e1",
    )
    with engine.invocation():
        engine.start("counter", id="c")
    assert engine.describe("c").owner is None  # released at the end of the invocation
    before, writes = snapshot(storage, ["c"]), WriteCount.of(storage)
    with pytest.raises(error):
        engine.update("c", "add", payload)
    assert WriteCount.of(storage).items == writes.items
    assert snapshot(storage, ["c"]) == before
    with engine.invocation():
        assert engine.update("c", "add", 10) == 10
    assert engine.describe("c").result == 10
