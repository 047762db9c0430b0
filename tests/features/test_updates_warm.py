"""An update does not re-apply the updates before it on the engine that parked the run.

The engine keeps the generator of a run it parked and reuses it on its next drive only while
the stored step, update and version records are byte-for-byte those it was built from
(docs/decisions/0013-update-cost.md). These tests pin the saving (one handler call per
update, however many came before) and, on purpose, the races that must defeat the reuse: a
second engine's update, a second engine moving the run on, a takeover under
``workflow-lease``, and a commit lost to a racing update after the handler already changed
the warm state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from feature_support import (
    Opener,
    appending,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
)

from weft_serverless import Engine, UpdateFailedError, workflow
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, Storage
from weft_serverless.testing import CrashingStorage, TestEngine, VirtualClock

WF = "wf-warm"
HANDLER_CALLS: list[Any] = []


def _collect(ctx: Any, _: Any) -> Any:
    """Collects updates at two park points; returns what it collected."""
    items: list[Any] = []

    def add(item: Any) -> list[Any]:
        HANDLER_CALLS.append(item)
        items.append(item)
        return list(items)

    ctx.on_update("add", add)
    ctx.on_query("items", lambda _: list(items))
    yield ctx.wait_for_signal("next")
    items.append("moved-on")
    yield ctx.wait_for_signal("next")
    return items


COLLECT = {"collect": workflow("collect").execute(_collect)}


def test_each_update_calls_only_its_own_handler(storage_factory: Opener) -> None:
    """The 30th update at one park point calls one handler, not 30: its cost no longer
    grows with the updates before it (apart from the one range read of the partition)."""
    te = make_engine(storage_factory, COLLECT)
    te.start("collect", id=WF)
    for n in range(30):
        HANDLER_CALLS.clear()
        assert te.update(WF, "add", n) == list(range(n + 1))
        assert [n] == HANDLER_CALLS
    assert te.query(WF, "items") == list(range(30))  # a fresh replay agrees


def test_a_second_engines_writes_defeat_the_warm_run(storage_factory: Opener) -> None:
    """Engine B updates the run, then moves it to its next park point; each time engine A's
    kept generator no longer matches storage, so A replays and sees B's changes."""
    a = make_engine(storage_factory, COLLECT)
    b = make_engine(storage_factory, COLLECT)
    a.start("collect", id=WF)
    assert a.update(WF, "add", "a1") == ["a1"]
    assert b.update(WF, "add", "b1") == ["a1", "b1"]
    assert a.update(WF, "add", "a2") == ["a1", "b1", "a2"]
    b.signal(WF, "next")
    assert a.update(WF, "add", "a3") == ["a1", "b1", "a2", "moved-on", "a3"]
    a.signal(WF, "next")
    assert b.describe(WF).result == ["a1", "b1", "a2", "moved-on", "a3"]


def test_under_workflow_lease_a_takeover_defeats_the_warm_run(storage_factory: Opener) -> None:
    """Claims move between engines with each invocation (the epoch rises every time); A's
    kept generator is used only while nothing it was built from changed."""
    clock = VirtualClock()

    def engine(engine_id: str) -> Engine:
        return Engine.create(
            storage_factory(),
            COLLECT,
            ownership="workflow-lease",
            background_tasks="manual",
            clock=clock,
            engine_id=engine_id,
        )

    a, b = engine("a"), engine("b")
    with a.invocation():
        a.start("collect", id=WF)
        assert a.update(WF, "add", "a1") == ["a1"]
    with b.invocation():
        assert b.update(WF, "add", "b1") == ["a1", "b1"]
    with a.invocation():
        HANDLER_CALLS.clear()
        assert a.update(WF, "add", "a2") == ["a1", "b1", "a2"]
        assert a.update(WF, "add", "a3") == ["a1", "b1", "a2", "a3"]
    # a2: a read-only check (A holds no claim yet) and a cold drive (B's update is new to
    # A), each replaying a1 and b1; a3: the claim is held and nothing changed, so warm.
    assert HANDLER_CALLS == ["a1", "b1", "a2", "a1", "b1", "a2", "a3"]
    with b.invocation():
        b.signal(WF, "next")
        b.signal(WF, "next")
    assert a.describe(WF).result == ["a1", "b1", "a2", "a3", "moved-on"]
    a.close()
    b.close()


class RaceOnUpdate(CrashingStorage):
    """Runs ``race()`` once, just before the first update record this handle would write."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.race: Any = None

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        prefix = keys.UPDATE_APPLIED_PREFIX
        if self.race is not None and any(
            isinstance(op, Put) and op.key.sort.startswith(prefix) for op in ops
        ):
            race, self.race = self.race, None
            race()
        return super()._conditional_batch(conditions, ops)


def test_a_commit_lost_after_the_handler_ran_leaves_no_trace(storage_factory: Opener) -> None:
    """A's handler has already changed the warm state when its commit loses to B's update
    at the same position: A re-reads and applies its update once, after B's."""
    racing = RaceOnUpdate(storage_factory())
    a = TestEngine(COLLECT, storage=racing)
    b = make_engine(storage_factory, COLLECT)
    a.start("collect", id=WF)
    assert a.update(WF, "add", "a1") == ["a1"]
    racing.race = lambda: b.update(WF, "add", "b1")
    assert a.update(WF, "add", "a2") == ["a1", "b1", "a2"]
    assert a.update(WF, "add", "a3") == ["a1", "b1", "a2", "a3"]
    assert b.query(WF, "items") == ["a1", "b1", "a2", "a3"]


def test_a_failed_update_leaves_no_half_change_in_the_warm_run(storage_factory: Opener) -> None:
    """A handler that changes state and then raises: the next update starts from storage."""

    def body(ctx: Any, _: Any) -> Any:
        items: list[Any] = []

        def explode(item: Any) -> None:
            items.append(item)
            raise ValueError("no")

        ctx.on_update("add", appending(items, list))
        ctx.on_update("explode", explode)
        yield ctx.wait_for_signal("never")

    te = make_engine(storage_factory, {"half": workflow("half").execute(body)})
    te.start("half", id=WF)
    assert te.update(WF, "add", 1) == [1]
    with pytest.raises(UpdateFailedError):
        te.update(WF, "explode", 2)
    assert te.update(WF, "add", 3) == [1, 3]


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
def test_a_crash_at_the_update_write_leaves_no_half_change_on_the_same_engine(
    storage_factory: Opener, after: bool
) -> None:
    """The drive dies at the update's write, after its handler changed the warm state, and
    the same engine goes on: its next update starts from storage, which holds the crashed
    update once (the write landed) or not at all (it did not)."""
    te, crashing = crashable_engine(storage_factory, COLLECT)
    te.start("collect", id=WF)
    assert te.update(WF, "add", "a1", update_id="u1") == ["a1"]
    crashing.arm(puts_prefix(keys.UPDATE_APPLIED_PREFIX, WF), after=after)
    with expect_crash():
        te.update(WF, "add", "a2", update_id="u2")
    landed = ["a1", "a2"] if after else ["a1"]
    assert te.update(WF, "add", "a3", update_id="u3") == [*landed, "a3"]
    assert te.update(WF, "add", "a2", update_id="u2") == (
        ["a1", "a2"] if after else [*landed, "a3", "a2"]
    )
    assert te.query(WF, "items") == (["a1", "a2", "a3"] if after else ["a1", "a3", "a2"])


BODY_RUNS: list[str] = []


def _counted(ctx: Any, _: Any) -> Any:
    """Notes each time its body runs from the top; then collects one update and a signal."""
    BODY_RUNS.append(ctx.workflow_id)
    items: list[Any] = []
    ctx.on_update("add", lambda item: items.append(item) or list(items))
    yield ctx.wait_for_signal("next")
    return items


COUNTED = {"counted": workflow("counted").execute(_counted)}


def test_a_run_started_again_after_a_purge_never_resumes_the_old_runs_generator(
    storage_factory: Opener,
) -> None:
    """A purge and a start of the same id at the same instant give a fingerprint equal to the
    old run's (same id, type, input, creation time, no records). The new run must still run
    its body from the top: a new run never resumes a generator kept for an earlier one, and
    the cancelled run's generator is closed when it is cancelled, not at some later drive."""
    te = make_engine(storage_factory, COUNTED)
    BODY_RUNS.clear()
    te.start("counted", id=WF)
    assert BODY_RUNS == [WF]
    assert len(te.runtime.parked) == 1
    te.cancel(WF)
    assert len(te.runtime.parked) == 0
    te.purge(WF)
    te.start("counted", id=WF)  # the virtual clock has not moved: same creation time
    assert BODY_RUNS == [WF, WF]
    assert te.update(WF, "add", "new") == ["new"]
    te.signal(WF, "next")
    assert te.describe(WF).result == ["new"]
