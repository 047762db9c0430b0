"""Layout 3 (``workflow-lease@3``, ADR 0056): the claim's holder is part of the run's head.

A claim is one conditional put of the head (epoch + 1, holder set), written only when the
ownership changes; the write that parks or ends the run, or the invocation's end, puts the
head back without its holder. No holder item and no claims-index entry are written: a dead
owner's claim is taken over by the wake its run's timers bring (the start's wake-up, a fired
timer not yet deleted, a signal's timer). Every status change rewrites the head, so a claim
read before a run ended can never land after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ownership_support import (
    RENEW,
    TAKEOVER,
    TTL,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    epoch_of,
    fencing_violations,
    holder_of,
    layout_2,
    layout_3,
    make_engine,
    rewritten_op_records,
    step_wait_step,
    stepping,
)

from weft_serverless import Engine, read_owner
from weft_serverless.engine.ownership import PARK_LAYOUT
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Key, Op, Storage
from weft_serverless.testing import (
    CrashingStorage,
    DelegatingStorage,
    SimulatedCrash,
    VirtualClock,
)

Gen = Iterator[Any]


def between(calls: Calls) -> dict[str, Any]:
    """The between-the-steps run: a step, a sleep, a signal wait, a step."""
    return step_wait_step(calls, sleep=10)


def head_of(storage: Storage, workflow_id: str) -> Head:
    data = storage.get(keys.owner_head_key(workflow_id))
    assert data is not None
    return Head.from_bytes(data)


def claim_records(storage: Storage, workflow_id: str) -> list[Key]:
    """The items the earlier layouts wrote per claim: none here."""
    found = [
        keys.owner_holder_key(workflow_id),
        keys.claim_index_key(keys.DEFAULT_SHARDS, workflow_id),
    ]
    return [key for key in found if storage.get(key) is not None]


def test_a_fresh_store_carries_the_holder_in_the_head(storage_factory: Opener) -> None:
    """The start claims the run in its batch: the head holds the engine, the epoch and the
    claim's expiry; no holder item, no index entry. The invocation's end puts the head back
    with no holder (the newest step stays in it), on the same epoch."""
    clock, calls = VirtualClock(), Calls()
    engine = make_engine(storage_factory, between(calls), "e1", clock)
    store = storage_factory()
    with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        engine.start("flow", 1, id="w")
        head = head_of(store, "w")
        assert head.holder is not None and head.holder.engine_id == "e1"
        assert head.holder.expires_at == clock() + TTL
        assert holder_of(store, "w") == head.holder.record(head.epoch)
        owner = read_owner(store, "w")  # what describe, the CLI and the console show
        assert owner is not None and owner.epoch == head.epoch
        assert owner.holder is not None and owner.holder.engine_id == "e1"
    released = head_of(store, "w")
    assert released.holder is None and released.epoch == head.epoch
    assert (released.slot, released.record) == (head.slot, head.record)
    assert claim_records(store, "w") == []
    marker = engine.runtime.fence.host.storage.get(keys.meta_key(keys.OWNERSHIP_MODE))
    assert marker is not None and PARK_LAYOUT.encode() in marker


def test_a_wake_acquires_with_one_put_of_the_head_and_no_transaction(
    storage_factory: Opener,
) -> None:
    """A fired sleep whose code then runs a step claims the run before the step's side
    effect with one conditional put of the head (epoch + 1), conditioned on the head alone:
    no state condition, no holder item. (A fire that reaches its next wait without a step
    claims nothing, ADR 0059: ``test_lazy_fire.py``.)"""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = stepping(calls)
    starter = make_engine(storage_factory, flows, "e1", clock)
    with starter.invocation(time_left=lambda: 60.0, heartbeat=False):
        starter.start("flow", 1, id="w")
    epoch = epoch_of(storage_factory(), "w")
    pass_engine = make_engine(storage_factory, flows, "e2", clock, journal=journal)
    clock.advance(10)
    with pass_engine.invocation(time_left=lambda: 60.0, heartbeat=False):
        pass_engine.run_maintenance()
    claims = [
        w
        for w in journal.writes
        if w.committed and any(op.key == keys.owner_head_key("w") for op in w.ops)
    ]
    acquire = claims[0]
    assert [op.key for op in acquire.ops] == [keys.owner_head_key("w")]
    assert [c.key for c in acquire.conditions] == [keys.owner_head_key("w")]
    taken = Head.from_bytes(acquire.ops[0].value)  # type: ignore[union-attr]
    assert taken.epoch == epoch + 1 and taken.holder is not None
    assert taken.holder.engine_id == "e2"
    assert head_of(storage_factory(), "w").holder is None  # released at the invocation's end
    assert claim_records(storage_factory(), "w") == []


def test_two_engines_acquiring_one_run_have_one_winner(storage_factory: Opener) -> None:
    """Both read the unheld head; both put it with epoch + 1: exactly one lands, and the
    other's wake is retained for the winner. On layout 3: on layout 4 a wake that finds the
    run free writes no claim (ADR 0059; its races are in ``test_lazy_fire.py``)."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    storage_factory = layout_3(storage_factory)
    starter = make_engine(storage_factory, flows, "e0", clock)
    with starter.invocation(time_left=lambda: 60.0, heartbeat=False):
        starter.start("flow", 1, id="w")
    epoch = epoch_of(storage_factory(), "w")
    a = make_engine(storage_factory, flows, "a", clock, recover=False)
    store = HookedStorage(storage_factory())
    b_hooked = make_engine(lambda: store, flows, "b", clock, recover=False)
    verdicts: list[str] = []

    def a_claims_first(conditions: list[Condition], ops: list[Op]) -> None:
        if not verdicts and ops and ops[0].key == keys.owner_head_key("w"):
            verdicts.append(a.runtime.fence.prepare_wake("w", "test"))

    store.before_write = a_claims_first
    verdict = b_hooked.runtime.fence.prepare_wake("w", "test")
    assert verdicts == ["drive"] and verdict == "retain"
    head = head_of(storage_factory(), "w")
    assert head.epoch == epoch + 1 and head.holder is not None and head.holder.engine_id == "a"
    assert "w" not in b_hooked.runtime.fence.claims  # type: ignore[attr-defined]
    assert b_hooked.runtime.fence.prepare_wake("w", "test") == "retain"


def test_an_acquire_racing_the_end_of_the_run_is_refused(storage_factory: Opener) -> None:
    """The wake reads the head, then the state (running); the owner ends the run between
    the state read and the claim's put. The end rewrote the head (its holder cleared), so
    the claim's put on the head read is refused, and the finished run holds no claim."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    owner = make_engine(storage_factory, flows, "owner", clock)
    owner.start("flow", 1, id="w")  # a long-lived owner: it keeps its claim while parked
    clock.advance(10)
    owner.run_maintenance()  # the sleep fires; the run waits for "go", still held by owner
    store = HookedStorage(storage_factory())
    late = make_engine(lambda: store, flows, "late", clock, recover=False)
    clock.advance(TAKEOVER)  # the owner's claim looks expired to the late engine

    def end_the_run_after_the_state_read(key: Key) -> None:
        if key == keys.state_key("w") and store.after_get is not None:
            store.after_get = None
            owner.runtime.fence.renew_all()  # owner is alive: renewed, then it ends the run
            owner.signal("w", "go", 5)

    store.after_get = end_the_run_after_the_state_read
    verdict = late.runtime.fence.prepare_wake("w", "signal")
    assert verdict == "collect"
    assert owner.describe("w").status == "completed"
    final = head_of(storage_factory(), "w")
    assert final.holder is None
    assert "w" not in late.runtime.fence.claims  # type: ignore[attr-defined]


def test_a_holder_not_expired_is_not_taken_over_and_an_expired_one_is(
    storage_factory: Opener,
) -> None:
    """A run whose drive died holding its claim keeps its start's wake-up; the pass that
    fires it before the claim expired leaves it to the holder, the first pass after takes it
    over (epoch + 1) and finishes what the dead owner was doing."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    crashing = CrashingStorage(storage_factory())
    dead = make_engine(lambda: crashing, flows, "dead", clock)
    crashing.crash_before_write = crashing.writes + 2  # the start lands; its first step dies
    with pytest.raises(SimulatedCrash):
        dead.start("flow", 1, id="w")
    store = storage_factory()
    epoch = epoch_of(store, "w")
    survivor = make_engine(storage_factory, flows, "survivor", clock, recover=False)
    clock.advance(TTL)  # expired, but not past its grace; the wake-up is not due either
    survivor.run_maintenance()
    assert holder_of(store, "w")["engine_id"] == "dead"  # type: ignore[index]
    clock.advance(TAKEOVER - TTL)
    survivor.run_maintenance()  # the wake-up fires: the claim is taken over and driven
    assert epoch_of(store, "w") == epoch + 1
    assert survivor.describe("w").status == "running"  # on its sleep, then the signal
    clock.advance(10)
    survivor.run_maintenance()
    survivor.signal("w", "go", 5)
    assert survivor.get_handle("w").result() == 7
    assert head_of(store, "w").holder is None


def test_a_live_holder_renewing_keeps_its_run_from_a_firing_elsewhere(
    storage_factory: Opener,
) -> None:
    """A long-lived owner keeps its claim while parked and renews it (one head put); another
    engine's pass firing the run's timer meanwhile retains it for the owner."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    owner = make_engine(storage_factory, flows, "owner", clock)
    owner.start("flow", 1, id="w")
    other = make_engine(storage_factory, flows, "other", clock, recover=False)
    for _ in range(int(TAKEOVER // RENEW) + 1):
        clock.advance(RENEW)
        owner.runtime.fence.renew_all()  # the head is put again with a later expiry
    head = head_of(storage_factory(), "w")
    assert head.holder is not None and head.holder.expires_at == clock() + TTL
    report = other.run_maintenance()
    assert report.parts.get("timers_retained", 0) >= 1
    assert holder_of(storage_factory(), "w")["engine_id"] == "owner"  # type: ignore[index]
    assert calls.count("a") == 1


def test_a_deposed_owner_lands_no_write(storage_factory: Opener) -> None:
    """The owner stalls past its claim's expiry, holding the run parked; another engine takes
    it over at the fired sleep. The stalled owner's renewal, its release and its next step
    are all refused (they expect the head it last wrote)."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = between(calls)
    stalled = make_engine(storage_factory, flows, "stalled", clock, journal=journal)
    stalled.start("flow", 1, id="w")  # long-lived: keeps the claim while parked on the sleep
    successor = make_engine(
        storage_factory, flows, "successor", clock, journal=journal, recover=False
    )
    clock.advance(TAKEOVER)
    successor.run_maintenance()  # the sleep's timer fires; the stale claim is taken over
    assert holder_of(storage_factory(), "w")["engine_id"] == "successor"  # type: ignore[index]
    mark = len(journal.writes)
    stalled.runtime.fence.renew_all()
    assert stalled.runtime.fence.release_parked() == 0  # its claim was dropped at renewal
    successor.signal("w", "go", 5)
    assert successor.get_handle("w").result() == 7
    late = [w for w in journal.writes[mark:] if w.engine == "stalled" and w.committed]
    assert late == []
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_a_crash_at_every_write_between_the_steps_loses_and_doubles_nothing(
    storage_factory: Opener,
) -> None:
    """The start (parks on a sleep), the pass that fires the sleep (parks on a signal) and
    the signal that ends the run, each in its own invocation; the engine dies before, then
    after, each write in turn. Another engine finishes every run: the right result, every
    step committed once, no write of a deposed owner counted, no claim left."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)

    def whole_run(engine: Engine, run: str) -> None:
        with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
            engine.start("flow", 1, id=run)
        clock.advance(10)
        with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
            engine.run_maintenance()
        with engine.invocation(time_left=lambda: 60.0, heartbeat=False):
            engine.signal(run, "go", 5)

    counting = CrashingStorage(storage_factory())
    whole_run(make_engine(lambda: counting, flows, "count", clock), "count")
    total = counting.writes
    assert total >= 8
    for when in ("before", "after"):
        journal = Journal()
        for n in range(1, total + 1):
            run = f"{when}-{n}"
            crashing = CrashingStorage(RecordingStorage(storage_factory(), run, journal))
            engine = make_engine(lambda c=crashing: c, flows, run, clock)  # type: ignore[misc]
            setattr(crashing, f"crash_{when}_write", crashing.writes + n)
            with contextlib.suppress(SimulatedCrash):
                whole_run(engine, run)
        survivor = make_engine(storage_factory, flows, "survivor", clock, journal=journal)
        for _ in range(3):
            clock.advance(TAKEOVER)
            survivor.run_maintenance()
        for n in range(1, total + 1):
            run = f"{when}-{n}"
            if (when, n) == ("before", 1):  # the start never landed
                continue
            if survivor.describe(run).status != "completed":
                survivor.signal(run, "go", 5)
                clock.advance(TAKEOVER)
                survivor.run_maintenance()
            assert survivor.get_handle(run).result() == 7, run
            assert head_of(storage_factory(), run).holder is None, run
            assert claim_records(storage_factory(), run) == [], run
        assert fencing_violations(journal) == []
        assert rewritten_op_records(journal) == {}


class HookedStorage(DelegatingStorage):
    """A handle that calls ``after_get`` after each point read and ``before_write`` before
    each conditional batch (None: nothing)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.after_get: Callable[[Key], None] | None = None
        self.before_write: Callable[[list[Condition], list[Op]], None] | None = None

    def _get(self, key: Key) -> bytes | None:
        found = super()._get(key)
        if self.after_get is not None:
            self.after_get(key)
        return found

    def _conditional_batch(self, conditions: Any, ops: Any) -> bool:
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook(list(conditions), list(ops))
        return super()._conditional_batch(conditions, ops)


def test_a_run_parked_on_a_layout_2_store_finishes_under_this_release(
    storage_factory: Opener,
) -> None:
    """A store an earlier release set up keeps its layout: a run parked there with its holder
    item and claims-index entry, its owner dead, is taken over from the index, driven to its
    end by this release, and leaves neither record; the marker stays ``workflow-lease@2``."""
    clock, calls = VirtualClock(), Calls()
    flows = between(calls)
    old_store = layout_2(storage_factory)
    dead = make_engine(old_store, flows, "dead", clock)
    dead.start("flow", 1, id="w")  # parked on its sleep, claimed the layout-2 way
    store = storage_factory()
    assert store.get(keys.owner_holder_key("w")) is not None
    assert store.get(keys.claim_index_key(keys.DEFAULT_SHARDS, "w")) is not None
    assert head_of(store, "w").holder is None
    successor = make_engine(old_store, flows, "successor", clock, recover=False)
    clock.advance(TAKEOVER)
    report = successor.run_maintenance()
    assert report.parts["claims_reclaimed"] == 1
    successor.signal("w", "go", 5)
    assert successor.get_handle("w").result() == 7
    assert claim_records(store, "w") == []
    marker = store.get(keys.meta_key(keys.OWNERSHIP_MODE))
    assert marker is not None and b"workflow-lease@2" in marker
    assert calls.count("a") == 1 and calls.count("b") == 1
