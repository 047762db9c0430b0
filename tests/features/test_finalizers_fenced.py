"""Finalizers under races and fences: a registration racing a cancel is never lost nor lands
on an ended run, and a teardown is run by one engine whose every progress write is fenced
(a deposed engine lands nothing and stops). Every backend, virtual time."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import pytest
from feature_support import Calls, Opener, sorts_with

from weft_serverless import Engine, RetryPolicy, WorkflowContext, workflow
from weft_serverless.codec import decode
from weft_serverless.engine.ownership.store_lease import EngineLeaseLost
from weft_serverless.engine.teardown import CLAIM_TTL
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, SortRange, Storage
from weft_serverless.testing import DelegatingStorage, VirtualClock

Gen = Generator[Any, Any, Any]
TTL, RENEW = 30.0, 5.0


def _flow(ctx: WorkflowContext, _: Any) -> Gen:
    """Registers ``a``, waits for "go", registers ``b``, then waits an hour."""
    ctx.on_cancel("a", 1)
    yield ctx.wait_for_signal("go")
    ctx.on_cancel("b", 2)
    yield ctx.sleep("1h")


def _workflows(calls: Calls) -> dict[str, Any]:
    return {"w": workflow("w").activities(a=calls.fn("a"), b=calls.fn("b")).execute(_flow)}


def _engine(
    storage: Storage, workflows: dict[str, Any], name: str, clock: VirtualClock, **options: Any
) -> Engine:
    options.setdefault("max_clock_skew", math.inf)
    return Engine.create(
        storage,
        workflows,
        background_tasks="manual",
        clock=clock,
        engine_id=name,
        **options,
    )


class _Hooked(DelegatingStorage):
    """Runs ``on_scan`` once, right after the first scan of a ``fin#`` prefix read; and
    ``on_write`` once, right before the first batch putting a ``fin#`` key."""

    on_scan: Callable[[], None] | None = None
    on_write: Callable[[], None] | None = None

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        read = list(super()._scan(partition, rng, limit, reverse))
        if self.on_scan is not None and (rng.low or "").startswith(keys.FINALIZER_PREFIX):
            hook, self.on_scan = self.on_scan, None
            hook()  # lands after the read: the caller acts on what it read before
        return iter(read)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        registers = any(
            isinstance(op, Put) and op.key.sort.startswith(keys.FINALIZER_PREFIX) for op in ops
        )
        if self.on_write is not None and registers:
            hook, self.on_write = self.on_write, None
            hook()
        return super()._conditional_batch(conditions, ops)


def test_a_registration_landing_during_a_cancel_is_torn_down(storage_factory: Opener) -> None:
    """e1's cancel reads the finalizers (only ``a``); before its batch, e2 delivers "go" and
    the run registers ``b``. The cancel's batch, conditioned on no registration after the
    ones it read, is refused and retried: the teardown runs both, ``b`` first."""
    calls, clock = Calls(), VirtualClock()
    hooked = _Hooked(storage_factory())
    e1 = _engine(hooked, _workflows(calls), "e1", clock)
    e2 = _engine(storage_factory(), _workflows(calls), "e2", clock)
    e1.start("w", None, id="w")
    hooked.on_scan = lambda: e2.signal("w", "go")
    e1.cancel("w")
    assert len(sorts_with(hooked, "w", keys.FINALIZER_PREFIX)) == 2
    assert calls.log == [("b", 2), ("a", 1)]
    assert e1.describe("w").status == "cancelled"


def test_a_registration_after_the_cancel_landed_is_refused(storage_factory: Opener) -> None:
    """e2's drive registers ``b`` after e1's cancel committed: the registration batch is
    conditioned on the state the drive read, so nothing lands on the cancelled run and the
    teardown e1 armed (``a`` only) stays the whole truth."""
    calls, clock = Calls(), VirtualClock()
    hooked = _Hooked(storage_factory())
    e1 = _engine(storage_factory(), _workflows(calls), "e1", clock)
    e2 = _engine(hooked, _workflows(calls), "e2", clock)
    e1.start("w", None, id="w")
    hooked.on_write = lambda: e1.cancel("w")
    e2.signal("w", "go")
    assert calls.log == [("a", 1)]
    assert len(sorts_with(hooked, "w", keys.FINALIZER_PREFIX)) == 1
    assert e2.describe("w").status == "cancelled"


def _single(calls: list[Any], during_first: Callable[[], None]) -> dict[str, Any]:
    def release(arg: Any) -> None:
        calls.append(arg)
        if len(calls) == 1:
            during_first()

    def flow(ctx: WorkflowContext, _: Any) -> Gen:
        ctx.on_cancel("release", "hold-1")
        yield ctx.sleep("1h")

    return {"w": workflow("w").activities(release=release).execute(flow)}


def _teardown(storage: Storage) -> dict[str, Any]:
    data = storage.get(keys.teardown_key("w"))
    assert data is not None
    record: dict[str, Any] = decode(data)
    return record


def test_a_deposed_engine_lands_no_teardown_progress_under_workflow_lease(
    storage_factory: Opener,
) -> None:
    """A's claim on the teardown expires while its finalizer runs; B's maintenance takes it
    over (cleans A's expired claim up, claims with a new epoch) and completes it. A's progress
    commit is refused on the epoch, A stops: the finalizer ran at least once overall, and the
    progress is recorded once (B's)."""
    clock, ran = VirtualClock(), []
    engines: dict[str, Engine] = {}

    def stall_then_b_takes_over() -> None:
        clock.advance(CLAIM_TTL + TTL + 2 * RENEW + 1)
        engines["B"].run_maintenance()

    workflows = _single(ran, stall_then_b_takes_over)
    options = {
        "ownership": "workflow-lease",
        "workflow_claim_ttl": TTL,
        "workflow_claim_renew_interval": RENEW,
    }
    for name in ("A", "B"):
        engines[name] = _engine(storage_factory(), workflows, name, clock, **options)
    store = storage_factory()
    engines["A"].start("w", None, id="w")
    with pytest.warns(WorkflowClaimLost):
        engines["A"].cancel("w")
    assert ran == ["hold-1", "hold-1"]
    record = _teardown(store)
    assert record["status"] == "completed" and record["holder"] is None
    assert [(item["state"], item["attempts"]) for item in record["items"]] == [("done", 1)]
    assert engines["A"].runtime.metrics.counters.get("teardowns_deposed") == 1
    assert store.get(keys.owner_holder_key("w")) is None  # B released its claim


def test_a_deposed_engine_lands_no_teardown_progress_under_lease(storage_factory: Opener) -> None:
    """A's store lease expires while its finalizer runs; B takes the lease and the teardown
    over and completes it. A's progress commit fails the lease condition: A stops."""
    clock, ran = VirtualClock(), []
    engines: dict[str, Engine] = {}
    options = {"ownership": "lease", "lease_ttl": TTL, "lease_renew_interval": RENEW}

    def stall_then_b_takes_over() -> None:
        clock.advance(CLAIM_TTL + TTL + 1)
        engines["B"] = _engine(storage_factory(), workflows, "B", clock, **options)
        engines["B"].run_maintenance()

    workflows = _single(ran, stall_then_b_takes_over)
    engines["A"] = _engine(storage_factory(), workflows, "A", clock, **options)
    store = storage_factory()
    engines["A"].start("w", None, id="w")
    with pytest.warns(EngineLeaseLost):
        engines["A"].cancel("w")
    assert ran == ["hold-1", "hold-1"]
    record = _teardown(store)
    assert record["status"] == "completed"
    assert [(item["state"], item["attempts"]) for item in record["items"]] == [("done", 1)]
    assert engines["A"].runtime.closed


@pytest.mark.parametrize("ownership", ["none", "lease", "workflow-lease"])
def test_every_mode_runs_a_teardown_and_leaves_no_claim(
    storage_factory: Opener, ownership: str
) -> None:
    """A cancel and an own failure (``on_failure``) each run their teardown once under every
    ownership mode; the claim taken for it is released (no holder, no claims-index entry)."""
    calls, clock = Calls(), VirtualClock()

    def failing(ctx: WorkflowContext, _: Any) -> Gen:
        ctx.on_cancel("a", "on-failure", on_failure=True)
        yield ctx.run("boom", None, retry=RetryPolicy(max_attempts=1))

    def boom(_: Any) -> None:
        raise RuntimeError("broken")

    flows = {
        **_workflows(calls),
        "f": workflow("f").activities(a=calls.fn("a"), boom=boom).execute(failing),
    }
    engine = _engine(storage_factory(), flows, "e1", clock, ownership=ownership)
    engine.start("w", None, id="w")
    engine.cancel("w")
    engine.start("f", None, id="f")
    assert engine.describe("f").status == "failed"
    assert calls.log == [("a", 1), ("a", "on-failure")]
    store = storage_factory()
    for workflow_id in ("w", "f"):
        teardown = engine.describe(workflow_id).teardown
        assert teardown is not None and teardown["status"] == "completed"
        assert store.get(keys.owner_holder_key(workflow_id)) is None
        assert store.get(keys.claim_index_key(keys.DEFAULT_SHARDS, workflow_id)) is None
    clock.advance(3600)
    engine.run_maintenance()
    assert len(calls.log) == 2
