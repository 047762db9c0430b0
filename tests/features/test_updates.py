"""Updates: validated, durable, idempotent changes to a parked workflow's state, with a result.

Rules pinned here (docs/decisions/0005-updates-and-queries.md):

* a validator rejects before anything is stored (``UpdateValidationError.issues``: message and
  optional path), and so do an unknown update name, a handler that raises, a bad payload and a
  finished workflow;
* ``update_id`` makes a retry return the first result without applying the update again;
* an update and its effect are durable: a crash right after the update's commit leaves a
  store from which a fresh engine answers queries with the new state, and replay rebuilds it.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import (
    T0,
    Opener,
    WriteCount,
    appending,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
    recover_fresh,
    refused,
    snapshot,
    sorts_with,
)

from weft_serverless import (
    CodecError,
    InvalidArgumentError,
    PayloadTooLargeError,
    UnknownUpdateError,
    UpdateFailedError,
    UpdateValidationError,
    WorkflowBusyError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    workflow,
)
from weft_serverless.codec import encode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Put

WF = "wf-cart"


def _cart(ctx: Any, limit: int) -> Any:
    """Collects items by update until ``limit`` are in, then charges them."""
    items: list[str] = []

    def add(item: str) -> int:
        items.append(item)
        return len(items)

    def validate(item: Any) -> list[dict[str, Any]] | None:
        if not isinstance(item, str) or not item:
            return [{"message": "item must be a non-empty string", "path": ["item"]}]
        return None

    def explode(item: str) -> None:
        items.append(item)  # a half-made change that must not survive the failure
        raise ValueError("cannot take " + item)

    def strict(item: Any) -> bool:
        if item == "boom":
            raise ValueError("boom is not allowed")
        if item == "long":
            raise UpdateValidationError([{"message": "too long", "path": ["item", 0]}])
        return bool(item != "no")

    ctx.on_update("add", add, validator=validate)
    ctx.on_update("explode", explode)
    ctx.on_update("strict", add, validator=strict)
    ctx.on_query("items", lambda _: list(items))
    yield ctx.wait_until(lambda: len(items) >= limit)
    receipt = yield ctx.run("charge", list(items))
    return {"items": items, "receipt": receipt}


CART = workflow("cart").activities(charge=lambda items: f"charged {len(items)}").execute(_cart)
WORKFLOWS = {"cart": CART}


def _stored_updates(storage: Any, workflow_id: str = WF) -> list[str]:
    return sorts_with(storage, workflow_id, keys.UPDATE_APPLIED_PREFIX)


def test_update_returns_the_handler_result_and_changes_state(storage_factory: Opener) -> None:
    """Normal path: the handler's result comes back, the change is visible and drives the run."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("cart", 2, id=WF)
    assert te.update(WF, "add", "apple") == 1
    assert te.query(WF, "items") == ["apple"]
    assert len(_stored_updates(te.storage)) == 1
    assert te.update(WF, "add", "pear") == 2
    assert te.describe(WF).result == {"items": ["apple", "pear"], "receipt": "charged 2"}


REJECTIONS: list[tuple[str, str, Any, list[dict[str, Any]]]] = [
    ("issues-list", "add", 5, [{"message": "item must be a non-empty string", "path": ["item"]}]),
    ("returns-false", "strict", "no", [{"message": "rejected by validator", "path": None}]),
    ("raises", "strict", "boom", [{"message": "boom is not allowed", "path": None}]),
    ("raises-issues", "strict", "long", [{"message": "too long", "path": ["item", 0]}]),
]


def test_validator_rejects_before_anything_is_stored(storage_factory: Opener) -> None:
    """A validator's rejection (a list of issues, ``False``, an exception, or an
    ``UpdateValidationError`` of its own) is an ``UpdateValidationError`` listing its issues
    (message and path); the store is byte-for-byte unchanged and no write was even attempted,
    so the rejected ``update_id`` stays free."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("cart", 1, id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    for case, name, payload, issues in REJECTIONS:
        with pytest.raises(UpdateValidationError) as caught:
            te.update(WF, name, payload, update_id="u-rejected")
        assert caught.value.issues == issues, case
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes
    assert te.update(WF, "add", "apple", update_id="u-rejected") == 1


def test_update_id_makes_a_retry_return_the_first_result(storage_factory: Opener) -> None:
    """A repeated ``update_id`` returns the first result and does not apply the update again,
    also from a fresh engine after a restart."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("cart", 3, id=WF)
    assert te.update(WF, "add", "apple", update_id="u1") == 1
    assert te.update(WF, "add", "apple", update_id="u1") == 1
    assert te.update(WF, "add", "banana", update_id="u1") == 1  # same id: first result
    assert te.query(WF, "items") == ["apple"]
    recover_fresh(te, storage_factory)
    assert te.update(WF, "add", "apple", update_id="u1") == 1
    assert te.query(WF, "items") == ["apple"]
    assert len(_stored_updates(te.storage)) == 1


def test_unknown_update_name_stores_nothing(storage_factory: Opener) -> None:
    """An update name without a handler raises ``UnknownUpdateError`` naming the handlers."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("cart", 1, id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    with pytest.raises(UnknownUpdateError, match="add"):
        te.update(WF, "remove", "apple")
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage).items == writes.items


def test_failing_handler_stores_nothing_and_leaves_no_half_change(
    storage_factory: Opener,
) -> None:
    """A handler that raises gives ``UpdateFailedError``; nothing is stored, and the change it
    made in memory before raising is gone (the next update and queries do not see it)."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("cart", 2, id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    with pytest.raises(UpdateFailedError) as caught:
        te.update(WF, "explode", "bomb")
    assert caught.value.error_type == "ValueError"
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage).items == writes.items
    assert te.query(WF, "items") == []
    assert te.update(WF, "add", "apple") == 1
    assert te.describe(WF).status == "running"


def test_unencodable_or_oversized_result_fails_the_update(storage_factory: Opener) -> None:
    """A handler result the codec cannot store, or one over the payload limit, fails the
    update (``UpdateFailedError``) and stores nothing."""

    def body(ctx: Any, _: Any) -> Any:
        ctx.on_update("weird", lambda _: object())
        ctx.on_update("big", lambda _: "x" * 5000)
        yield ctx.wait_for_signal("never")

    te = make_engine(
        storage_factory, {"weird": workflow("weird").execute(body)}, max_payload_bytes=4096
    )
    te.start("weird", id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    with pytest.raises(UpdateFailedError, match="CodecError"):
        te.update(WF, "weird")
    with pytest.raises(UpdateFailedError, match="PayloadTooLargeError"):
        te.update(WF, "big")
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage).items == writes.items


BAD_ARGUMENTS: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("empty-name", {"name": ""}, InvalidArgumentError),
    ("empty-id", {"update_id": ""}, InvalidArgumentError),
    ("long-id", {"update_id": "u" * 129}, InvalidArgumentError),
    ("unencodable", {"payload": object()}, CodecError),
    ("oversized", {"payload": "x" * 5000}, PayloadTooLargeError),
]


def test_bad_update_arguments_are_rejected_before_any_write(storage_factory: Opener) -> None:
    """Bad names, ids and payloads fail at the call with a typed error, writing nothing."""
    te = make_engine(storage_factory, WORKFLOWS, max_payload_bytes=4096)
    te.start("cart", 1, id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    for case, kwargs, error in BAD_ARGUMENTS:
        call: dict[str, Any] = {"name": "add", "payload": "apple", **kwargs}
        with refused(case, error):
            te.update(WF, call.pop("name"), call.pop("payload"), **call)
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes


def test_update_while_this_engine_drives_the_run_times_out_busy(storage_factory: Opener) -> None:
    """An update that cannot get the run because this engine is driving it (here: sent from
    inside the run's own activity) waits at most ``timeout`` and raises ``WorkflowBusyError``
    (retryable); nothing of it is stored, and the same update succeeds afterwards."""
    seen: list[str] = []

    def body(ctx: Any, _: Any) -> Any:
        items: list[str] = []
        ctx.on_update("add", appending(items))
        yield ctx.run("busy")
        yield ctx.wait_until(lambda: len(items) >= 1)
        return items

    te = make_engine(
        storage_factory, {"busy": workflow("busy").activities(busy=lambda: None).execute(body)}
    )

    def busy() -> None:
        try:
            te.update(WF, "add", "early", update_id="u1", timeout=0.05)
        except WorkflowBusyError as exc:
            seen.append(exc.code)

    te.mock("busy", lambda _: busy())
    te.start("busy", id=WF)
    assert seen == ["WorkflowBusyError"]
    assert _stored_updates(te.storage) == []
    assert te.update(WF, "add", "early", update_id="u1") == 1
    assert te.describe(WF).result == ["early"]


def test_update_to_a_finished_or_unknown_workflow(storage_factory: Opener) -> None:
    """A finished run refuses updates (``WorkflowNotRunningError``); an unknown id is
    ``WorkflowNotFoundError``; neither writes anything."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("cart", 1, id=WF)
    te.update(WF, "add", "apple")
    assert te.describe(WF).status == "completed"
    before, writes = snapshot(te.storage, [WF, "nobody"]), WriteCount.of(te.storage)
    with pytest.raises(WorkflowNotRunningError):
        te.update(WF, "add", "pear")
    with pytest.raises(WorkflowNotFoundError):
        te.update("nobody", "add", "pear")
    assert snapshot(te.storage, [WF, "nobody"]) == before
    assert WriteCount.of(te.storage) == writes


def test_handler_registered_later_is_unknown_at_an_earlier_park_point(
    storage_factory: Opener,
) -> None:
    """Handlers exist from the point the workflow registers them: an update sent while the run
    is parked earlier is an ``UnknownUpdateError``, and accepted once it has moved on."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.wait_for_signal("open")
        seen: list[Any] = []
        ctx.on_update("note", appending(seen))
        yield ctx.wait_for_signal("close")
        return seen

    te = make_engine(storage_factory, {"late": workflow("late").execute(body)})
    te.start("late", id=WF)
    with pytest.raises(UnknownUpdateError):
        te.update(WF, "note", 1)
    te.signal(WF, "open")
    assert te.update(WF, "note", 1) == 1
    te.signal(WF, "close")
    assert te.describe(WF).result == [1]


def test_crash_after_the_update_commit_keeps_update_and_result(storage_factory: Opener) -> None:
    """Crash right after the update's commit (the caller never got its answer): a fresh
    engine's query shows the new state, the retried ``update_id`` returns the first result
    without applying it twice, and replay carries the state to the end."""
    te, crashing = crashable_engine(storage_factory, WORKFLOWS)
    te.start("cart", 2, id=WF)
    crashing.arm(puts_prefix(keys.UPDATE_APPLIED_PREFIX, WF), after=True)
    with expect_crash():
        te.update(WF, "add", "apple", update_id="u1")
    recover_fresh(te, storage_factory)
    assert te.query(WF, "items") == ["apple"]
    assert te.update(WF, "add", "apple", update_id="u1") == 1
    assert te.query(WF, "items") == ["apple"]
    assert te.update(WF, "add", "pear", update_id="u2") == 2
    assert te.describe(WF).result == {"items": ["apple", "pear"], "receipt": "charged 2"}


def test_crash_between_the_update_and_the_step_it_unblocks(storage_factory: Opener) -> None:
    """The update unblocks the workflow; a crash after the update's commit but before the step
    commit that follows: recovery replays the update and finishes the step, once."""
    te, crashing = crashable_engine(storage_factory, WORKFLOWS)
    charged: list[Any] = []
    te.mock("charge", appending(charged, lambda _: "ok"))
    te.start("cart", 1, id=WF)
    crashing.arm(puts_prefix(keys.UPDATE_APPLIED_PREFIX, WF), after=True)
    with expect_crash():
        te.update(WF, "add", "apple", update_id="u1")
    assert charged == []
    recover_fresh(te, storage_factory)
    assert te.describe(WF).result == {"items": ["apple"], "receipt": "ok"}
    assert charged == [["apple"]]
    assert te.update(WF, "add", "apple", update_id="u1") == 1  # still answered after the end


def test_crash_before_the_update_commit_stores_nothing(storage_factory: Opener) -> None:
    """Crash just before the update's write: nothing of it is stored, so a retry under the
    same ``update_id`` on a fresh engine applies it (exactly once)."""
    te, crashing = crashable_engine(storage_factory, WORKFLOWS)
    te.start("cart", 2, id=WF)
    crashing.arm(puts_prefix(keys.UPDATE_APPLIED_PREFIX, WF), after=False)
    with expect_crash():
        te.update(WF, "add", "apple", update_id="u1")
    recover_fresh(te, storage_factory)
    assert _stored_updates(te.storage) == []
    assert te.query(WF, "items") == []
    assert te.update(WF, "add", "apple", update_id="u1") == 1
    assert te.query(WF, "items") == ["apple"]


def test_replay_reapplies_updates_in_order_at_their_park_points(storage_factory: Opener) -> None:
    """Updates recorded at different park points are re-applied where they were applied, in
    order, by every replay (a query on a fresh engine and the run's own continuation)."""

    def body(ctx: Any, _: Any) -> Any:
        log: list[str] = []
        ctx.on_update("log", appending(log, list))
        ctx.on_query("log", lambda _: list(log))
        yield ctx.wait_for_signal("next")
        log.append("after-first-park")
        yield ctx.wait_for_signal("next")
        return log

    te = make_engine(storage_factory, {"log": workflow("log").execute(body)})
    te.start("log", id=WF)
    te.update(WF, "log", "a")
    assert te.update(WF, "log", "b") == ["a", "b"]
    te.signal(WF, "next")
    recover_fresh(te, storage_factory)
    assert te.query(WF, "log") == ["a", "b", "after-first-park"]
    assert te.update(WF, "log", "c") == ["a", "b", "after-first-park", "c"]
    te.signal(WF, "next")
    assert te.describe(WF).result == ["a", "b", "after-first-park", "c"]


def _latest(ctx: Any, _: Any) -> Any:
    """Keeps the payload of the last update applied; the run returns it."""
    latest: list[Any] = [None]

    def set_latest(value: Any) -> Any:
        latest[0] = value
        return value

    ctx.on_update("set", set_latest)
    ctx.on_query("latest", lambda _: latest[0])
    yield ctx.wait_for_signal("done")
    return latest[0]


@pytest.mark.backends("memory", "sqlite")
def test_updates_past_9999_at_one_park_point_replay_in_order(storage_factory: Opener) -> None:
    """With 10,000 updates already recorded at one park point, the next one replays last: the
    query and the final result show its value, not update 9,999's (the sequence in the key
    sorts as a number past four digits).

    Memory and SQLite only: replaying 10,000 records per call takes minutes on moto. That the
    same keys come back in number order from DynamoDB is checked on every backend in
    ``tests/unit/test_key_counters.py``.
    """
    te = make_engine(storage_factory, {"latest": workflow("latest").execute(_latest)})
    te.start("latest", id=WF)
    slot = keys.step_slot(0)
    records = [
        Put(
            keys.update_applied_key(WF, slot, seq),
            encode({"id": f"u{seq}", "name": "set", "payload": encode(seq), "at": T0}),
        )
        for seq in range(10_000)
    ]
    for start in range(0, len(records), 100):  # what 10,000 earlier updates stored
        te.storage.batch(records[start : start + 100])
    assert te.query(WF, "latest") == 9_999
    assert te.update(WF, "set", 10_000) == 10_000
    assert te.query(WF, "latest") == 10_000
    te.signal(WF, "done")
    assert te.describe(WF).result == 10_000


def _leaf(ctx: Any, _: Any) -> Any:
    return (yield ctx.now())


def _child_after_update(ctx: Any, _: Any) -> Any:
    ready = [False]
    ctx.on_update("go", lambda _: ready.__setitem__(0, True))
    yield ctx.wait_until(lambda: ready[0])
    yield ctx.start_child("leaf", None, id="child-after-update")
    return "done"


def test_a_child_started_by_an_update_is_driven_by_the_update_call(
    storage_factory: Opener,
) -> None:
    """The update lets the parent start a child: the update call drives that child (and so
    the parent to its end) inline, as any waking call does, not a wake-up grace later."""
    te = make_engine(
        storage_factory,
        {
            "p": workflow("p").execute(_child_after_update),
            "leaf": workflow("leaf").execute(_leaf),
        },
    )
    te.start("p", id="p")
    te.update("p", "go")
    assert te.describe("child-after-update").status == "completed"
    assert te.describe("p").status == "completed"
