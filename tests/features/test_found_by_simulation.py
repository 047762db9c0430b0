"""Defects the deterministic simulation found, each pinned by a plain test.

Each test names the invariant that caught it; the seed and the shrunk replay line are in
docs/decisions/0047-simulation-covers-the-engine.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from weft_serverless import (
    Engine,
    EngineLeaseLostError,
    MemoryStorage,
    current_activity,
    workflow,
)
from weft_serverless.codec import decode
from weft_serverless.engine import control
from weft_serverless.storage import keys
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine, VirtualClock


def test_a_run_continued_after_an_async_activity_is_driven_again() -> None:
    """``unexpected-errors``: the async attempt's pending record (``pend#<slot>@<n>``) is
    set aside at the continue like every record of the run before; its slot reference was
    read as a step number, so every later drive of the new run raised ``ValueError``."""
    tokens: list[str] = []

    def ask(_: Any) -> None:
        tokens.append(current_activity().complete_async())

    def body(ctx: Any, spec: dict[str, int]) -> Any:
        if spec["round"] == 0:
            answer = yield ctx.run("ask", 1)
            yield ctx.continue_as_new({"round": 1, "answer": answer})
        yield ctx.sleep(1)
        return spec

    te = TestEngine({"asker": workflow("asker").activities(ask=ask).execute(body)})
    te.start("asker", {"round": 0}, id="a-1")
    te.complete_activity(tokens[0], "yes")
    te.advance(1)
    description = te.describe("a-1")
    assert (description.status, description.run) == ("completed", 2)
    assert description.result == {"round": 1, "answer": "yes"}


def _crash_after_the_start(body: Any) -> tuple[TestEngine, MemoryStorage]:
    """A run whose process died right after its start landed: it keeps its wake-up."""
    store = MemoryStorage()
    flows = {"job": workflow("job").activities(work=lambda: None).execute(body)}
    te = TestEngine(flows, storage=CrashingStorage(store, crash_after_write=1), recover=False)
    with pytest.raises(SimulatedCrash):
        te.start("job", id="j-1")
    te.crash()
    te.recover(store)
    assert store.get(keys.wake_key("j-1")) is not None
    return te, store


def _waits(ctx: Any, _: Any) -> Any:
    yield ctx.run("work")
    yield ctx.wait_for_signal("go")


@pytest.mark.parametrize("end", ["cancel", "time-out"])
def test_a_run_ended_from_outside_keeps_no_wake_up(end: str) -> None:
    """``terminal-leaves-nothing``: a cancel or a time-out (a move from outside, which reads
    no history) left the run's wake-up pointer for ever, and its timer until a pass fired
    it on a finished run; the terminal batch now deletes both."""
    te, store = _crash_after_the_start(_waits)
    if end == "cancel":
        te.cancel("j-1")
    else:
        assert te.engine.runtime is not None
        assert control.time_out(te.engine.runtime, "j-1")
    assert te.describe("j-1").status == ("cancelled" if end == "cancel" else "timed-out")
    assert store.get(keys.wake_key("j-1")) is None
    timers = [
        decode(value)
        for shard in range(keys.TIMER_SHARDS)
        for _, value in store.scan(keys.timer_partition(shard))
    ]
    assert [t for t in timers if t["wf"] == "j-1"] == []


def _done(ctx: Any, _: Any) -> Any:
    yield ctx.run("work")
    return "done"


def test_a_purge_by_an_engine_that_lost_the_lease_deletes_nothing() -> None:
    """``no-deposed-writes`` (lease): a purge deletes the state in a fenced batch, then the
    rest of the partition in chunks that carried no fence, so an engine that had lost the
    store-wide lease (here: repeating a purge a crash cut short) still deleted records."""
    store, clock = MemoryStorage(), VirtualClock()
    flows = {"job": workflow("job").activities(work=lambda: 1).execute(_done)}
    options: dict[str, Any] = {
        "ownership": "lease",
        "lease_ttl": 3.0,
        "lease_renew_interval": 1.0,
        "background_tasks": "manual",
        "clock": clock,
    }
    crashing = CrashingStorage(store)
    first = Engine.create(crashing, flows, engine_id="first", **options)
    first.start("job", id="j-1")
    crashing.crash_after_write = crashing.writes + 1
    with pytest.raises(SimulatedCrash):
        first.purge("j-1")  # the state is gone; the rest of the partition is left
    left = list(store.scan(keys.workflow_partition("j-1")))
    assert [sort for sort, _ in left] == ["op#00000000"]
    clock.advance(10.0)
    Engine.create(store, flows, engine_id="second", **options)  # takes the expired lease
    with pytest.raises(EngineLeaseLostError), pytest.warns(RuntimeWarning, match="lost"):
        first.purge("j-1")
    assert list(store.scan(keys.workflow_partition("j-1"))) == left
