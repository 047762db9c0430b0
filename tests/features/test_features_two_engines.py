"""Features under ``ownership="workflow-lease"`` with two engines on one store.

Rules pinned here (docs/decisions/0005-updates-and-queries.md, docs/features.md):

* an update needs the workflow's owner: sent to the engine that does not hold it, it fails
  with ``WorkflowClaimUnavailableError`` (retryable, nothing written); once the owner's
  invocation ends (its parked claims are released) or its claim expires after a crash, the
  same update succeeds on the other engine, and a retried ``update_id`` is answered anywhere;
* a query needs no owner: any engine answers it, read-only;
* an async completion sent to the non-owner is recorded durably and reaches the owner (it
  writes a wake timer the owner's maintenance fires), or the sender drives it itself when no
  engine holds the workflow;
* an execution timeout fired by a non-owner's maintenance deposes a running owner: its next
  step commit is refused, the run stays ``timed-out`` and no further step lands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from feature_support import Opener, WriteCount, appending, snapshot, sorts_with

from weft_serverless import (
    ActivityTokenNotFoundError,
    Engine,
    UnknownUpdateError,
    UpdateFailedError,
    UpdateValidationError,
    WorkflowClaimLost,
    WorkflowClaimUnavailableError,
    WorkflowDefinition,
    WorkflowTimedOutError,
    current_activity,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import VirtualClock

WF = "wf-shared"
TTL, RENEW = 30.0, 5.0
EXPIRED = TTL + 2 * RENEW + 1  # past expires_at + 2 x renew interval: a takeover is allowed


def _engine(
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition],
    engine_id: str,
    clock: VirtualClock,
) -> Engine:
    return Engine.create(
        storage_factory(),
        workflows,
        ownership="workflow-lease",
        background_tasks="manual",
        engine_id=engine_id,
        clock=clock,
        workflow_claim_ttl=TTL,
        workflow_claim_renew_interval=RENEW,
    )


def _holder(engine: Engine) -> str | None:
    owner = engine.describe(WF).owner
    return None if owner is None else str(owner["engine_id"])


# -- updates and queries -------------------------------------------------------------------


def _cart(ctx: Any, limit: int) -> Any:
    items: list[str] = []
    ctx.on_update("add", appending(items), validator=lambda item: isinstance(item, str))
    ctx.on_query("items", lambda _: list(items))
    yield ctx.wait_until(lambda: len(items) >= limit)
    return items


CART = {"cart": workflow("cart").execute(_cart)}


def test_update_on_the_non_owner_is_retryable_until_the_owner_parks(
    storage_factory: Opener,
) -> None:
    """While e1 holds the run (inside its invocation) e2's update fails with
    ``WorkflowClaimUnavailableError`` naming e1 and writes nothing; queries work on e2 all
    along; after e1's invocation ends the same update succeeds on e2, and a retry of it on e1
    is answered from the stored response."""
    clock = VirtualClock()
    e1, e2 = (_engine(storage_factory, CART, name, clock) for name in ("e1", "e2"))
    store = storage_factory()
    with e1.invocation(heartbeat=False):
        e1.start("cart", 2, id=WF)
        assert _holder(e2) == "e1"
        before, writes = snapshot(store, [WF]), WriteCount.of(e2.runtime.storage)
        with pytest.raises(WorkflowClaimUnavailableError) as caught:
            e2.update(WF, "add", "apple", update_id="u1")
        assert caught.value.held_by == "e1"
        assert snapshot(store, [WF]) == before
        assert WriteCount.of(e2.runtime.storage).items == writes.items
        assert e2.query(WF, "items") == []
    assert _holder(e2) is None
    assert e2.update(WF, "add", "apple", update_id="u1") == 1
    assert e1.query(WF, "items") == ["apple"]
    assert e1.update(WF, "add", "apple", update_id="u1") == 1  # answered, not re-applied
    with pytest.raises(WorkflowClaimUnavailableError):
        e1.update(WF, "add", "pear")  # e2 holds it now (no invocation scope released it)
    e2.close()
    assert e1.update(WF, "add", "pear") == 2
    assert e1.describe(WF).result == ["apple", "pear"]


def test_update_after_the_owner_crashed_waits_for_the_claim_to_expire(
    storage_factory: Opener,
) -> None:
    """e1 crashes while holding a parked run: e2's update is refused (retryable) until the
    claim has expired; then it succeeds. The run has no timer (it waits
    for an update), so no pass takes it over first: the update's own wake does, and lets it go
    again when the run parks (the claim lives in the run's head, ADR 0056)."""
    clock = VirtualClock()
    e1 = _engine(storage_factory, CART, "e1", clock)
    e1.start("cart", 1, id=WF)
    del e1  # crashed: its claim stays in the store until it expires
    e2 = _engine(storage_factory, CART, "e2", clock)
    with pytest.raises(WorkflowClaimUnavailableError):
        e2.update(WF, "add", "apple")
    clock.advance(EXPIRED)
    e2.run_maintenance()
    assert _holder(e2) == "e1"  # expired, and nothing wakes the run before the update
    assert e2.update(WF, "add", "apple") == 1
    assert _holder(e2) is None  # taken over by the update's wake, released as the run parked
    assert e2.describe(WF).result == ["apple"]


def test_a_rejected_update_leaves_no_claim_behind(storage_factory: Opener) -> None:
    """An update its validator rejects takes no claim (it is tried on a read-only replay): e2
    can update the run right after, and once e2's invocation ends the run is free for e1."""
    clock = VirtualClock()
    e1, e2 = (_engine(storage_factory, CART, name, clock) for name in ("e1", "e2"))
    with e1.invocation(heartbeat=False):
        e1.start("cart", 2, id=WF)
    with e2.invocation(heartbeat=False):
        with pytest.raises(UpdateValidationError):
            e2.update(WF, "add", 42)
        assert _holder(e2) is None
        assert e2.update(WF, "add", "apple") == 1
    assert _holder(e1) is None
    assert e1.update(WF, "add", "pear") == 2


def test_a_rejected_update_does_not_block_the_owner(storage_factory: Opener) -> None:
    """The owner refuses a bad update, an unknown one and one whose handler raises, and each
    time a good update right after is applied."""

    def body(ctx: Any, limit: int) -> Any:
        items: list[str] = []
        ctx.on_update("add", appending(items), validator=lambda item: isinstance(item, str))
        ctx.on_update("boom", lambda _: 1 / 0)
        yield ctx.wait_until(lambda: len(items) >= limit)
        return items

    e1 = _engine(storage_factory, {"cart": workflow("cart").execute(body)}, "e1", VirtualClock())
    e1.start("cart", 4, id=WF)
    for number, (name, payload, error) in enumerate(
        [
            ("add", 42, UpdateValidationError),
            ("remove", "x", UnknownUpdateError),
            ("boom", "x", UpdateFailedError),
        ],
        start=1,
    ):
        with pytest.raises(error):
            e1.update(WF, name, payload)
        assert e1.update(WF, "add", f"item-{number}") == number


# -- async completion ----------------------------------------------------------------------


def _approval_workflows(tokens: list[str]) -> dict[str, WorkflowDefinition]:
    def request(document: str) -> None:
        tokens.append(current_activity().complete_async())

    def body(ctx: Any, document: str) -> Any:
        decision = yield ctx.run("request", document)
        return {"decision": decision}

    return {"approval": workflow("approval").activities(request=request).execute(body)}


def test_async_completion_sent_to_the_non_owner_reaches_the_owner(
    storage_factory: Opener,
) -> None:
    """e1 holds the parked run; e2 accepts the completion (durably: result and wake timer),
    cannot drive the run and keeps the timer for the owner; e1's maintenance fires it and
    completes the run. The token is then spent on both engines."""
    clock, tokens = VirtualClock(), list[str]()
    flows = _approval_workflows(tokens)
    e1, e2 = (_engine(storage_factory, flows, name, clock) for name in ("e1", "e2"))
    e1.start("approval", "doc", id=WF)
    assert _holder(e2) == "e1"
    e2.complete_activity(tokens[0], "yes")
    assert sorts_with(e2.runtime.storage, WF, keys.ASYNC_RESULT_PREFIX) != []
    e2.run_maintenance()
    assert e2.describe(WF).status == "running"
    e1.run_maintenance()
    assert e2.describe(WF).result == {"decision": "yes"}
    for engine in (e1, e2):
        with pytest.raises(ActivityTokenNotFoundError):
            engine.complete_activity(tokens[0], "again")


def test_async_completion_on_any_engine_once_the_owner_parked(storage_factory: Opener) -> None:
    """When the owner's invocation has ended (no engine holds the run), the engine that
    receives the completion claims the run and finishes it inline."""
    clock, tokens = VirtualClock(), list[str]()
    flows = _approval_workflows(tokens)
    e1, e2 = (_engine(storage_factory, flows, name, clock) for name in ("e1", "e2"))
    with e1.invocation(heartbeat=False):
        e1.start("approval", "doc", id=WF)
    e2.complete_activity(tokens[0], "yes")
    assert e2.describe(WF).result == {"decision": "yes"}


# -- execution timeout ---------------------------------------------------------------------


def test_timeout_fired_by_the_non_owner_deposes_the_running_owner(
    storage_factory: Opener,
) -> None:
    """While e1 runs an activity, the deadline passes and e2's maintenance times the run out
    (rotating the owner epoch). e1's step commit is then refused: it warns
    ``WorkflowClaimLost``, no op record lands, the next activity never runs, and the run stays
    ``timed-out`` through later maintenance on both engines."""
    clock = VirtualClock()
    engines: dict[str, Engine] = {}
    ran: list[str] = []
    fired: list[int] = []

    def slow(_: Any) -> str:
        ran.append("slow")
        clock.advance(21)  # past the 20 s deadline, before e1's claim could be taken over
        fired.append(engines["e2"].run_maintenance().timers_fired)
        return "slow-done"

    def body(ctx: Any, _: Any) -> Any:
        first = yield ctx.run("slow")
        return (yield ctx.run("after", first))

    flows = {
        "deadline": workflow("deadline")
        .activities(slow=slow, after=lambda value: ran.append("after"))
        .execute(body)
    }
    for name in ("e1", "e2"):
        engines[name] = _engine(storage_factory, flows, name, clock)
    e1, e2 = engines["e1"], engines["e2"]
    with pytest.warns(WorkflowClaimLost):
        handle = e1.start("deadline", id=WF, execution_timeout=20)
    store = storage_factory()
    assert fired == [1]  # e2 fired the deadline while e1 was inside the activity
    assert e1.describe(WF).status == "timed-out"
    assert sorts_with(store, WF, keys.OP_PREFIX) == []
    assert ran == ["slow"]
    with pytest.raises(WorkflowTimedOutError):
        handle.result()
    clock.advance(EXPIRED)
    e1.run_maintenance()
    e2.run_maintenance()
    assert e2.describe(WF).status == "timed-out"
    assert sorts_with(store, WF, keys.OP_PREFIX) == []
    assert ran == ["slow"]
