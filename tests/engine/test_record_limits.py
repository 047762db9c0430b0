"""Runs within the documented limits finish; what no batch could hold fails at the yield.

DynamoDB holds at most 380,000 bytes inline per value and 100 actions per transaction. A run
whose input and result are each under the payload limit, or whose step leaves many timers
behind, must still finish; a step whose own writes cannot fit in one atomic batch raises a
typed error at its yield, so the run fails with a clear reason instead of retrying forever.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import Opener, make_engine, stored_timers

from weft_serverless import WorkflowFailedError, workflow
from weft_serverless.storage import keys
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine

KB = 1000


def _echo_big(ctx: Any, data: bytes) -> Any:
    yield ctx.now()
    return data[::-1]


def test_input_and_result_each_within_the_limit_finish_and_read_back(
    storage_factory: Opener,
) -> None:
    """200 KB in and 200 KB out: over 380,000 bytes together, so the result gets its own
    record; the run completes and describe/result give it back."""
    data = bytes(range(256)) * (200 * KB // 256)
    te = make_engine(storage_factory, {"big": workflow("big").execute(_echo_big)})
    handle = te.start("big", data, id="big")
    assert handle.result() == data[::-1]
    description = te.describe("big")
    assert (description.status, description.result) == ("completed", data[::-1])
    state = te.storage.get(keys.state_key("big"))
    assert state is not None
    assert len(state) <= te.storage.capabilities().max_value_bytes
    assert te.list(status="running") == []


def test_a_small_result_stays_in_the_state_record(storage_factory: Opener) -> None:
    """The usual run is stored exactly as before: no separate result record."""
    te = make_engine(storage_factory, {"big": workflow("big").execute(_echo_big)})
    assert te.start("big", b"abc", id="small").result() == b"cba"
    assert te.storage.get(keys.result_key("small")) is None


N_WAITS = 120


def _many_timed_waits(ctx: Any, mode: str) -> Any:
    waits = [ctx.wait_for_signal(f"s{i}", timeout="1h") for i in range(N_WAITS)]
    if mode == "race":
        return (yield ctx.race(*waits))
    return (yield ctx.all(*waits))


def _limited(max_batch_ops: int) -> MemoryStorage:
    return MemoryStorage(max_batch_ops=max_batch_ops)


# The batch split is the adapter's, the same in-process and over HTTP; the HTTP copies cost
# half a minute of the suite and proved nothing more.
@pytest.mark.backends("memory", "sqlite", "dynamodb")
@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
@pytest.mark.parametrize("mode", ["all", "race"])
def test_a_step_leaving_more_timers_than_a_batch_holds_still_commits(
    storage_factory: Opener, mode: str, ownership: str
) -> None:
    """120 timed waits: the step that ends them has more stale timers to delete than one
    DynamoDB transaction holds. Deleting a stale timer is cleanup, not part of the step, so it
    goes in follow-up batches (fenced like any write) and the run finishes; no timer is left."""
    te = make_engine(
        storage_factory,
        {"many": workflow("many").execute(_many_timed_waits)},
        ownership=ownership,
    )
    handle = te.start("many", mode, id="many")
    assert len(stored_timers(te.storage)) == N_WAITS
    if mode == "race":
        te.signal("many", "s7", "seven")
        assert handle.result() == (7, "seven")
    else:
        for i in range(N_WAITS):
            te.signal("many", f"s{i}", i)
        assert handle.result() == list(range(N_WAITS))
    assert stored_timers(te.storage) == []


def test_many_timers_commit_on_a_store_with_small_batches() -> None:
    """The same on memory storage limited to 10 actions per batch (cheap to reason about)."""
    te = TestEngine({"many": workflow("many").execute(_many_timed_waits)}, storage=_limited(10))
    handle = te.start("many", "race", id="many")
    te.signal("many", "s3", "three")
    assert handle.result() == (3, "three")
    assert stored_timers(te.storage) == []


def _leaf(ctx: Any, _: Any) -> Any:
    yield ctx.now()
    return 1


def _abandoning(ctx: Any, catch: bool) -> Any:
    yield ctx.sleep("1s")  # woken by its timer: the run then holds no wake-up of its own
    try:
        yield ctx.start_child("leaf", None, id="child-1", parent_close_policy="abandon")
    except Exception as exc:
        if not catch:
            raise
        return type(exc).__name__
    return "started"


# A start takes 2 actions; a child started with policy "abandon" takes 4 (the child's state
# and index entry, the parent's op record and the child's wake-up): it cannot fit in 3.
SMALL_BATCHES = 4


@pytest.mark.parametrize("catch", [True, False], ids=["caught", "uncaught"])
def test_a_step_whose_own_writes_exceed_a_batch_fails_at_the_yield(catch: bool) -> None:
    """Atomic writes are never split: StorageLimitError is raised at the yield (the workflow
    may catch it), nothing of the step is written, and the run ends instead of retrying."""
    store = _limited(SMALL_BATCHES)
    te = TestEngine(
        {"p": workflow("p").execute(_abandoning), "leaf": workflow("leaf").execute(_leaf)},
        storage=store,
    )
    handle = te.start("p", catch, id="p")
    te.advance(1)
    if catch:
        assert handle.result() == "StorageLimitError"
    else:
        with pytest.raises(WorkflowFailedError) as info:
            handle.result()
        assert info.value.error_type == "StorageLimitError"
        assert "atomic batch actions: 6 exceeds the maximum of 4" in info.value.error_message
    assert store.get(keys.state_key("child-1")) is None
    assert te.list(status="running") == []
    assert stored_timers(store) == []


def _race_scenario(te: TestEngine) -> None:
    te.signal("many", "s7", "seven", signal_id="s7-once")


def test_a_crash_between_a_step_and_its_cleanup_leaves_only_harmless_wakeups() -> None:
    """Crash before and after every write from the signal on (the step, each cleanup chunk,
    the terminal commit): after recovery the run ends with the same result, once, and every
    stale timer is gone after it fires."""
    probe = CrashingStorage(_limited(10))
    te = TestEngine({"many": workflow("many").execute(_many_timed_waits)}, storage=probe)
    te.start("many", "race", id="many")
    first = probe.writes + 1
    _race_scenario(te)
    last = probe.writes
    assert last - first >= 10  # the step, a dozen cleanup chunks, the end: worth crashing
    for write in range(first, last + 1):
        for where in ("crash_before_write", "crash_after_write"):
            inner = _limited(10)
            store = CrashingStorage(inner, **{where: write})
            te = TestEngine({"many": workflow("many").execute(_many_timed_waits)}, storage=store)
            te.start("many", "race", id="many")
            with pytest.raises(SimulatedCrash):
                _race_scenario(te)
            te.crash()
            te.recover(inner)
            _race_scenario(te)  # the client retries its call with the same signal id
            te.advance(2 * 3600)  # every timer left behind falls due and fires
            assert te.engine.get_handle("many").result() == (7, "seven"), (write, where)
            assert stored_timers(inner) == [], (write, where)
