"""Child workflows and their parent close policies: ``await``, ``abandon``, ``request-cancel``.

Rules pinned here: ``await`` (default) gives the child's result, raises its failure, and a
cancelled parent cancels the child; ``abandon`` gives the child's id at once and the child
outlives its parent; ``request-cancel`` gives the id and the child is cancelled when its
parent ends, however it ends. Starting a child is one batch with the parent's step, so a crash
right after it leaves exactly one child; a child's end hands its outcome to the parent in the
same batch, so a crash right after it still wakes the parent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_op,
    puts_state,
    recover_fresh,
)

from weft_serverless import WorkflowDefinition, workflow
from weft_serverless.codec import decode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, Storage
from weft_serverless.testing import CrashingStorage, TestEngine, VirtualClock

PARENT = "wf-parent"
CHILD = "wf-child"


def _child(ctx: Any, label: str) -> Any:
    yield ctx.run("work", label)
    verdict = yield ctx.wait_for_signal("finish")
    if verdict == "fail":
        raise ValueError("child gave up")
    return f"{label}:{verdict}"


def _parent(ctx: Any, policy: str) -> Any:
    try:
        got = yield ctx.start_child("child", "kid", id=CHILD, parent_close_policy=policy)
    except Exception as exc:
        return {"error": type(exc).__name__, "status": getattr(exc, "status", None)}
    ending = yield ctx.wait_for_signal("end")
    if ending == "fail":
        raise RuntimeError("parent failed")
    return {"got": got}


def _workflows(calls: Calls) -> dict[str, WorkflowDefinition]:
    return {
        "child": workflow("child").activities(work=calls.fn("work")).execute(_child),
        "parent": workflow("parent").execute(_parent),
    }


def _engine(storage_factory: Opener, calls: Calls) -> TestEngine:
    return make_engine(storage_factory, _workflows(calls))


def _status(te: TestEngine, workflow_id: str) -> str:
    return te.describe(workflow_id).status


def test_await_returns_the_childs_result(storage_factory: Opener) -> None:
    """``await``: the parent waits for and receives the child's result."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("parent", "await", id=PARENT)
    assert _status(te, CHILD) == "running"
    te.signal(CHILD, "finish", "done")
    te.run_maintenance()
    te.signal(PARENT, "end")
    assert te.describe(PARENT).result == {"got": "kid:done"}


def test_await_raises_the_childs_failure(storage_factory: Opener) -> None:
    """``await``: a failed child raises ``ChildWorkflowFailedError`` in the parent."""
    te = _engine(storage_factory, Calls())
    te.start("parent", "await", id=PARENT)
    te.signal(CHILD, "finish", "fail")
    te.run_maintenance()
    assert te.describe(PARENT).result == {"error": "ChildWorkflowFailedError", "status": "failed"}


def test_await_child_is_cancelled_with_its_parent(storage_factory: Opener) -> None:
    """``await``: cancelling the parent cancels the child it was waiting for."""
    te = _engine(storage_factory, Calls())
    te.start("parent", "await", id=PARENT)
    te.cancel(PARENT)
    assert _status(te, PARENT) == "cancelled"
    assert _status(te, CHILD) == "cancelled"


def test_abandoned_child_outlives_its_parent(storage_factory: Opener) -> None:
    """``abandon``: the step gives the child's id at once; the child keeps running after the
    parent completes, and later finishes on its own."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("parent", "abandon", id=PARENT)
    te.signal(PARENT, "end")
    assert te.describe(PARENT).result == {"got": CHILD}
    te.run_maintenance()
    assert _status(te, CHILD) == "running"
    te.signal(CHILD, "finish", "alone")
    assert te.describe(CHILD).result == "kid:alone"


@pytest.mark.parametrize("ending", ["complete", "fail", "cancel"])
def test_request_cancel_child_is_cancelled_when_the_parent_ends(
    storage_factory: Opener, ending: str
) -> None:
    """``request-cancel``: the step gives the id at once; when the parent ends (completed,
    failed or cancelled) the child is cancelled."""
    te = _engine(storage_factory, Calls())
    te.start("parent", "request-cancel", id=PARENT)
    assert _status(te, CHILD) == "running"
    if ending == "cancel":
        te.cancel(PARENT)
    else:
        te.signal(PARENT, "end", ending)
    assert _status(te, PARENT) == {"complete": "completed", "fail": "failed"}.get(
        ending, "cancelled"
    )
    te.run_maintenance()
    assert _status(te, CHILD) == "cancelled"


def test_crash_right_after_the_child_start(storage_factory: Opener) -> None:
    """The child's start and the parent's step are one batch: a crash right after it leaves
    exactly one child, which the fresh engine runs once; the parent goes on."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    crashing.arm(puts_op(PARENT, 0), after=True)
    with expect_crash():
        te.start("parent", "abandon", id=PARENT)
    recover_fresh(te, storage_factory)
    assert [s.id for s in te.list(workflow_type="child")] == [CHILD]
    assert calls.log == [("work", "kid")]
    te.signal(PARENT, "end")
    assert te.describe(PARENT).result == {"got": CHILD}


def test_crash_right_after_the_awaited_child_ends(storage_factory: Opener) -> None:
    """The child's end carries its outcome to the parent in the same batch: a crash right
    after it still lets the fresh engine complete the parent with the child's result."""
    te, crashing = crashable_engine(storage_factory, _workflows(Calls()))
    te.start("parent", "await", id=PARENT)
    crashing.arm(puts_state(CHILD), after=True)
    with expect_crash():
        te.signal(CHILD, "finish", "done")
    recover_fresh(te, storage_factory)
    te.run_maintenance()
    te.signal(PARENT, "end")
    assert te.describe(PARENT).result == {"got": "kid:done"}


@pytest.mark.parametrize(
    ("policy", "ending"),
    [("request-cancel", "complete"), ("await", "cancel")],
    ids=["request-cancel-completes", "await-cancelled"],
)
def test_crash_right_after_the_parent_ends_still_cancels_the_child(
    storage_factory: Opener, policy: str, ending: str
) -> None:
    """The close policy survives a crash: the parent's end is written, the process dies
    before cancelling the child, and the fresh engine (recovery plus maintenance) cancels it."""
    te, crashing = crashable_engine(storage_factory, _workflows(Calls()))
    te.start("parent", policy, id=PARENT)
    crashing.arm(puts_state(PARENT), after=True)
    with expect_crash():
        if ending == "cancel":
            te.cancel(PARENT)
        else:
            te.signal(PARENT, "end")
    assert _status(te, CHILD) == "running"  # the crash came before the child was cancelled
    recover_fresh(te, storage_factory)
    te.advance(60)
    assert _status(te, PARENT) == ("cancelled" if ending == "cancel" else "completed")
    assert _status(te, CHILD) == "cancelled"


def test_bad_child_starts(storage_factory: Opener) -> None:
    """An unknown child type raises ``ChildWorkflowFailedError`` (status ``not-started``) at
    the yield; an unknown policy fails the parent with ``InvalidArgumentError``."""

    def body(ctx: Any, kind: str) -> Any:
        if kind == "policy":
            yield ctx.start_child("child", "x", parent_close_policy="detach")
        try:
            yield ctx.start_child("ghost", "x")
        except Exception as exc:
            return {"error": type(exc).__name__, "status": getattr(exc, "status", None)}
        return "started"

    workflows = {**_workflows(Calls()), "odd": workflow("odd").execute(body)}
    te = make_engine(storage_factory, workflows)
    te.start("odd", "type", id="wf-type")
    assert te.describe("wf-type").result == {
        "error": "ChildWorkflowFailedError",
        "status": "not-started",
    }
    te.start("odd", "policy", id="wf-policy")
    error = te.describe("wf-policy").error
    assert error is not None
    assert error["type"] == "InvalidArgumentError"


# -- children under ownership="lease" --------------------------------------------------------

LEASE_TTL = 30.0


def _fan_out(ctx: Any, shape: str) -> Any:
    """Children started inside a combinator: their start batches join the combinator's."""
    if shape == "all":
        got = yield ctx.all(
            ctx.start_child("child", "a", id="wf-a"), ctx.start_child("child", "b", id="wf-b")
        )
        return got
    index, got = yield ctx.race(
        ctx.start_child("child", "a", id="wf-a", parent_close_policy="abandon"),
        ctx.sleep(60),
    )
    return [index, got]


def _lease_engine(storage_factory: Opener, calls: Calls) -> TestEngine:
    workflows = {**_workflows(calls), "fan": workflow("fan").execute(_fan_out)}
    return make_engine(storage_factory, workflows, ownership="lease")


@pytest.mark.parametrize("policy", ["await", "abandon", "request-cancel"])
def test_lease_engine_starts_a_child_with_every_policy(
    storage_factory: Opener, policy: str
) -> None:
    """Under ``ownership="lease"`` the child's start carries the store fence once (its start
    fragment and the parent's commit both bring it) and commits: the child runs, the parent
    gets its result or id."""
    calls = Calls()
    te = _lease_engine(storage_factory, calls)
    te.start("parent", policy, id=PARENT)
    assert _status(te, CHILD) == "running"
    assert calls.log == [("work", "kid")]
    te.signal(CHILD, "finish", "done")
    te.run_maintenance()
    te.signal(PARENT, "end")
    expected = "kid:done" if policy == "await" else CHILD
    assert te.describe(PARENT).result == {"got": expected}


@pytest.mark.parametrize("shape", ["all", "race"])
def test_lease_engine_starts_children_inside_all_and_race(
    storage_factory: Opener, shape: str
) -> None:
    """Child starts folded into ``ctx.all`` and ``ctx.race`` commits under ``lease``."""
    te = _lease_engine(storage_factory, Calls())
    te.start("fan", shape, id="wf-fan")
    te.signal("wf-a", "finish", "x")
    if shape == "all":
        te.signal("wf-b", "finish", "y")
    te.run_maintenance()
    expected = ["a:x", "b:y"] if shape == "all" else [0, "wf-a"]
    assert te.describe("wf-fan").result == expected
    assert _status(te, "wf-a") == "completed"


def test_lease_crash_right_after_the_child_start_then_a_new_holder_finishes(
    storage_factory: Opener,
) -> None:
    """Under ``lease``, a crash right after the child-start batch lands leaves one child; the
    next lease holder (after the dead one's lease lapsed) recovers both runs, fenced on its
    own epoch, runs the child's work once and hands its result to the parent."""
    calls = Calls()
    workflows = _workflows(calls)
    te, crashing = crashable_engine(storage_factory, workflows, ownership="lease")
    crashing.arm(puts_state(CHILD), after=True)
    with expect_crash():
        te.start("parent", "await", id=PARENT)
    assert calls.log == []
    te.clock.advance(LEASE_TTL + 1)
    recover_fresh(te, storage_factory)
    assert [s.id for s in te.list(workflow_type="child")] == [CHILD]
    assert calls.log == [("work", "kid")]
    te.signal(CHILD, "finish", "done")
    te.run_maintenance()
    te.signal(PARENT, "end")
    assert te.describe(PARENT).result == {"got": "kid:done"}


# -- two mode-none engines racing one child start --------------------------------------------


class BeforeChildStart(CrashingStorage):
    """A handle that runs ``meanwhile`` once, just before its engine sends a batch starting
    ``child_id``: the other engine's whole drive lands between this one's read and write."""

    def __init__(self, inner: Storage, child_id: str, meanwhile: Callable[[], None]) -> None:
        super().__init__(inner)
        self._child_state = keys.state_key(child_id)
        self._meanwhile: Callable[[], None] | None = meanwhile

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        hook = self._meanwhile
        if hook is not None and any(
            isinstance(op, Put) and op.key == self._child_state for op in ops
        ):
            self._meanwhile = None
            hook()
        return super()._conditional_batch(conditions, ops)


@pytest.mark.parametrize("policy", ["await", "abandon"])
def test_engine_losing_a_child_start_race_replays_the_winners_start(
    storage_factory: Opener, policy: str
) -> None:
    """Two mode-``none`` engines drive one parent to its ``start_child`` step. The winner
    starts the child; the loser's batch is refused, and it re-reads and replays that start:
    it never records ``not-started`` for the child its parent slot owns. One child runs once,
    and its parent gets its result (``await``) or its id (``abandon``)."""
    calls, clock = Calls(), VirtualClock()
    winner = TestEngine(_workflows(calls), storage=storage_factory(), clock=clock, recover=False)
    racing = BeforeChildStart(storage_factory(), CHILD, lambda: winner.recover_all())
    loser = TestEngine(_workflows(calls), storage=racing, clock=clock)
    loser.start("parent", policy, id=PARENT)
    store = storage_factory()
    step = store.get(keys.op_key(PARENT, keys.step_slot(0)))
    if policy == "await":
        assert step is None  # still waiting for the child: no outcome recorded
    else:
        assert step is not None and decode(decode(step)["v"]) == CHILD
    assert _status(loser, CHILD) == "running"
    assert [s.id for s in loser.list(workflow_type="child")] == [CHILD]
    assert calls.log == [("work", "kid")]
    loser.signal(CHILD, "finish", "done")
    loser.run_maintenance()
    loser.signal(PARENT, "end")
    expected = "kid:done" if policy == "await" else CHILD
    assert loser.describe(PARENT).result == {"got": expected}


@pytest.mark.parametrize("policy", ["await", "abandon", "request-cancel"])
def test_child_id_held_by_another_run_fails_the_start_with_every_policy(
    storage_factory: Opener, policy: str
) -> None:
    """A child id another run already holds raises ``ChildWorkflowFailedError`` (status
    ``not-started``) at the yield whatever the policy; the parent goes on rather than
    re-reading forever, and the other run is left as it was."""
    te = _engine(storage_factory, Calls())
    te.start("child", "other", id=CHILD)
    te.start("parent", policy, id=PARENT)
    assert te.describe(PARENT).result == {
        "error": "ChildWorkflowFailedError",
        "status": "not-started",
    }
    assert te.describe(CHILD).parent_id is None
    assert _status(te, CHILD) == "running"


@pytest.mark.parametrize("policy", ["await", "abandon"])
def test_child_reusing_a_purged_runs_id_claims_on_top_of_its_epoch(
    storage_factory: Opener, policy: str
) -> None:
    """Under ``workflow-lease`` a purged run keeps its owner epoch, so a child started with
    that id claims the next epoch in its start batch rather than being refused forever (the
    parent would stay ``running`` with nothing to drive it)."""
    te = make_engine(storage_factory, _workflows(Calls()), ownership="workflow-lease")
    te.start("child", "old", id=CHILD)
    te.signal(CHILD, "finish", "gone")
    assert _status(te, CHILD) == "completed"
    te.purge(CHILD)  # rotates the epoch (1 -> 2) and keeps it
    te.start("parent", policy, id=PARENT)
    assert _status(te, CHILD) == "running"
    epoch = te.storage.get(keys.owner_epoch_key(CHILD))
    assert epoch is not None and int.from_bytes(epoch, "big") == 3
    te.signal(CHILD, "finish", "done")
    te.run_maintenance()
    te.signal(PARENT, "end")
    expected = "kid:done" if policy == "await" else CHILD
    assert te.describe(PARENT).result == {"got": expected}
