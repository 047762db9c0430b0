"""The invocation heartbeat renews claims on its own thread while the main thread drives.

Each test forces one interleaving of a renewal (``renew_all``, what the heartbeat calls) with
the main thread at a chosen storage call, with no sleep: a ``HookedStorage`` runs the
renewal on another thread at that call, and a ``ProbeLock`` put in place of the claim's lock
tells when that thread is blocked on it (so the test never waits for a thread that cannot
proceed) and can hold the main thread back until the renewal has finished.

The invariant under test: a renewal acts only on a claim whose acquiring batch has landed
and that is still registered, and the holder bytes the engine remembers are read, compared
and rewritten atomically with the stored ones. Broken, each race cost a held claim
(``WorkflowClaimLost``) or a wake, leaving the run ``running`` with nothing driving it until
its claim expired. The store-wide ``lease`` mode had the same race between the heartbeat and
a maintenance pass renewing its one holder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ownership_support import (
    Calls,
    caught,
    counter,
    holder_of,
    make_engine,
    of_category,
    step_wait_step,
)

from weft_serverless import Engine
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.errors import WorkflowClaimLost, WorkflowWakeDiscarded
from weft_serverless.storage import keys
from weft_serverless.storage.base import (
    Condition,
    Delete,
    Key,
    Op,
    Put,
    Storage,
)
from weft_serverless.testing import DelegatingStorage, VirtualClock

Gen = Generator[Any, Any, Any]
WriteHook = Callable[[Sequence[Condition], Sequence[Op]], None]
Opener = Callable[[], Storage]

WAIT = 30.0  # a bound on waits for another thread that can always proceed; never reached


class HookedStorage(DelegatingStorage):
    """Delegates to ``inner``; runs ``after_get`` after a point read on the main thread and
    ``after_write`` after a write has been applied (each hook once, then it is cleared)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.after_get: Callable[[Key], None] | None = None
        self.after_write: WriteHook | None = None

    def _get(self, key: Key) -> bytes | None:
        value = super()._get(key)
        hook = self.after_get
        if hook is not None and threading.current_thread() is threading.main_thread():
            hook(key)
        return value

    def _batch(self, ops: Sequence[Op]) -> None:
        self.inner.batch(ops)
        self._written((), ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        ok = self.inner.conditional_batch(conditions, ops)
        if ok:
            self._written(conditions, ops)
        return ok

    def _written(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> None:
        hook = self.after_write
        if hook is not None and threading.current_thread() is threading.main_thread():
            hook(conditions, ops)


class ProbeLock:
    """A claim lock that reports contention and can make its holder wait after releasing.

    ``contended`` is set when an acquirer finds it held (it then blocks as usual). With
    ``after_release`` set, the thread releasing a contended lock waits for that event before
    going on, so the waiting thread runs first.
    """

    def __init__(self, contended: threading.Event) -> None:
        self._lock = threading.Lock()
        self.contended = contended
        self.after_release: threading.Event | None = None

    def __enter__(self) -> ProbeLock:
        if not self._lock.acquire(blocking=False):
            self._waiter = threading.current_thread()
            self.contended.set()
            self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        waiter = getattr(self, "_waiter", None)
        self._lock.release()
        if waiter not in (None, threading.current_thread()) and self.after_release is not None:
            assert self.after_release.wait(WAIT), "the waiting thread never finished"


class Heartbeat:
    """One renewal of every held claim, on its own thread, as the invocation heartbeat does."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.done = threading.Event()
        self.settled = threading.Event()  # done, or blocked on a claim lock
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Start the renewal and return once it has finished or is blocked on a claim lock."""

        def run() -> None:
            try:
                self.engine.runtime.fence.renew_all()
            finally:
                self.done.set()
                self.settled.set()

        self._thread = threading.Thread(target=run, name="test-heartbeat")
        self._thread.start()
        assert self.settled.wait(WAIT), "the renewal neither finished nor blocked"

    def join(self) -> None:
        assert self._thread is not None, "no beat happened"
        self._thread.join(WAIT)
        assert not self._thread.is_alive()


def two_steps(calls: Calls) -> dict[str, Any]:
    """a -> wait "go" -> b."""
    return step_wait_step(calls)


def hooked_engine(
    storage_factory: Opener, calls: Calls, clock: VirtualClock
) -> tuple[Engine, HookedStorage]:
    store = HookedStorage(storage_factory())
    return make_engine(lambda: store, two_steps(calls), "e1", clock), store


def probe_claim(engine: Engine, workflow_id: str, heartbeat: Heartbeat) -> ProbeLock:
    probe = ProbeLock(heartbeat.settled)
    engine.runtime.fence.claims[workflow_id].lock = probe  # type: ignore[attr-defined]
    return probe


def test_a_renewal_while_the_start_batch_is_in_flight_keeps_the_new_claim(
    storage_factory: Opener,
) -> None:
    """The start registers its claim before its batch commits; a heartbeat renewing at that
    moment found no stored holder, took the refusal for a lost claim and dropped it, so the
    new run was never driven. A claim whose acquiring batch has not landed is not renewed."""
    clock, calls = VirtualClock(), Calls()
    e1, store = hooked_engine(storage_factory, calls, clock)
    heartbeat = Heartbeat(e1)
    start_batch = keys.state_key("w")

    original = store._conditional_batch

    def renew_before_the_start_lands(conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        if heartbeat._thread is None and any(op.key == start_batch for op in ops):
            heartbeat.beat()
            heartbeat.join()
        return original(conditions, ops)

    store._conditional_batch = renew_before_the_start_lands  # type: ignore[method-assign]
    with caught() as seen, e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        e1.start("flow", 1, id="w")
        assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
    assert heartbeat.done.is_set()
    assert calls.count("a") == 1
    assert of_category(seen, WorkflowClaimLost) == []
    assert counter(e1, "claim_renewal_failures") == 0
    assert counter(e1, "claims_released_at_invocation_end") == 1

    e1.signal("w", "go", 5)
    assert e1.get_handle("w").result() == 7


def test_a_renewal_between_the_wake_check_read_and_compare_does_not_discard_the_wake(
    storage_factory: Opener,
) -> None:
    """Before driving a parked run the engine reads the stored holder and compares it with the
    bytes it remembers. A renewal landing between the read and the compare made the two differ,
    so the engine discarded its own wake and dropped its claim. The check now holds the claim's
    lock, and the renewal lands after it."""
    clock, calls = VirtualClock(), Calls()
    e1, store = hooked_engine(storage_factory, calls, clock)
    heartbeat = Heartbeat(e1)
    with caught() as seen, e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        e1.start("flow", 1, id="w")  # runs "a", parks on "go", keeps its claim in the scope
        probe_claim(e1, "w", heartbeat)
        clock.advance(1.0)  # so the renewed holder differs from the one read

        def renew_after_the_read(key: Key) -> None:
            if key in (keys.owner_holder_key("w"), keys.owner_head_key("w")) and (
                heartbeat._thread is None
            ):
                heartbeat.beat()

        store.after_get = renew_after_the_read
        e1.signal("w", "go", 5)
        heartbeat.join()
    assert calls.count("b") == 1
    assert e1.describe("w").status == "completed"
    assert of_category(seen, WorkflowWakeDiscarded) == []
    assert of_category(seen, WorkflowClaimLost) == []
    assert counter(e1, "claim_renewal_failures") == 0


def test_a_renewal_waiting_on_the_terminal_commit_does_not_report_a_lost_claim(
    storage_factory: Opener,
) -> None:
    """The terminal commit deletes the holder under the claim's lock, but the claim was
    forgotten only after the lock was released: a renewal waiting on that lock then tried to
    renew a deleted holder and reported the claim lost. The claim is now forgotten before the
    lock is released."""
    clock, calls = VirtualClock(), Calls()
    e1, store = hooked_engine(storage_factory, calls, clock)
    heartbeat = Heartbeat(e1)
    with caught() as seen, e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        e1.start("flow", 1, id="w")
        probe = probe_claim(e1, "w", heartbeat)
        probe.after_release = heartbeat.done

        def renew_after_the_terminal_commit(
            conditions: Sequence[Condition], ops: Sequence[Op]
        ) -> None:
            if _releases(ops) and heartbeat._thread is None:
                heartbeat.beat()  # blocks on the claim's lock, still held here

        store.after_write = renew_after_the_terminal_commit
        e1.signal("w", "go", 5)
        heartbeat.join()
    assert e1.describe("w").status == "completed"
    assert of_category(seen, WorkflowClaimLost) == []
    assert counter(e1, "claim_renewal_failures") == 0
    assert counter(e1, "claim_attempts.deposed") == 0
    assert "w" not in e1.runtime.fence.claims  # type: ignore[attr-defined]
    assert holder_of(store, "w") is None


def test_a_refused_renewal_of_a_replaced_claim_leaves_the_new_claim_alone(
    storage_factory: Opener,
) -> None:
    """A renewal refused because its claim was replaced meanwhile (here: suspended and resumed
    by this engine while the renewal was in flight) must not depose the new claim."""
    clock, calls = VirtualClock(), Calls()
    e1, store = hooked_engine(storage_factory, calls, clock)
    with caught() as seen, e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        e1.start("flow", 1, id="w")
        old = e1.runtime.fence.claims["w"]  # type: ignore[attr-defined]
        original = store._conditional_batch
        replaced: list[bool] = []

        def replace_during_renewal(conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
            renewal = _renews(conditions, ops)
            if renewal and not replaced:
                replaced.append(True)  # the main thread suspends and resumes meanwhile
                done = threading.Event()

                def main_side() -> None:
                    e1.suspend("w")
                    e1.resume("w")
                    done.set()

                threading.Thread(target=main_side).start()
                assert done.wait(WAIT)
            return original(conditions, ops)

        store._conditional_batch = replace_during_renewal  # type: ignore[method-assign]
        heartbeat = Heartbeat(e1)
        heartbeat.beat()
        heartbeat.join()
        store._conditional_batch = original  # type: ignore[method-assign]
        new = e1.runtime.fence.claims.get("w")  # type: ignore[attr-defined]
        assert replaced and new is not None and new is not old
        assert holder_of(store, "w")["epoch"] == 3  # type: ignore[index]
    assert of_category(seen, WorkflowClaimLost) == []
    assert counter(e1, "claim_attempts.deposed") == 0
    e1.signal("w", "go", 5)
    assert e1.get_handle("w").result() == 7


def test_a_heartbeat_renewing_the_store_lease_during_a_maintenance_renewal_keeps_the_lease(
    storage_factory: Opener,
) -> None:
    """Under ``lease`` a maintenance pass renews the store-wide lease on the caller's thread
    while the heartbeat may renew it on its own. Both compared against the same remembered
    holder, so the second write was refused and the engine stopped itself, lease "lost" to
    itself. Renewals of one engine are now serialised."""
    clock, calls = VirtualClock(), Calls()
    store = HookedStorage(storage_factory())
    e1 = make_engine(lambda: store, two_steps(calls), "e1", clock, ownership="lease")
    heartbeat = Heartbeat(e1)
    e1.runtime.fence._lock = ProbeLock(heartbeat.settled)  # type: ignore[attr-defined]
    holder = keys.meta_key(keys.LEASE_HOLDER)
    original = store._conditional_batch

    def beat_during_the_renewal(conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        if heartbeat._thread is None and [op.key for op in ops] == [holder]:
            heartbeat.beat()  # blocks on the lease's lock, held by this renewal
        return original(conditions, ops)

    store._conditional_batch = beat_during_the_renewal  # type: ignore[method-assign]
    clock.advance(5.0)  # the lease renewal is due
    report = e1.run_maintenance()
    heartbeat.join()
    assert report.parts["lease_renewed"] == 1
    assert counter(e1, "lease.renewal_failures") == 0
    assert not e1.runtime.fence.lost  # type: ignore[attr-defined]
    e1.start("flow", 1, id="w")
    assert calls.count("a") == 1


def _releases(ops: Sequence[Op]) -> bool:
    """A write that lets the claim on ``w`` go: the holder item deleted (layout 2), or the
    head put back with no holder (layout 3)."""
    head = keys.owner_head_key("w")
    return Delete(keys.owner_holder_key("w")) in ops or any(
        isinstance(op, Put) and op.key == head and Head.from_bytes(op.value).holder is None
        for op in ops
    )


def _renews(conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
    """A renewal of the claim on ``w``: its holder item put alone (layout 2), or its head put
    alone with the same epoch and step and a later expiry (layout 3)."""
    if not (len(ops) == 1 and isinstance(ops[0], Put)):
        return False
    if ops[0].key == keys.owner_holder_key("w"):
        return True
    expected = [c.expected for c in conditions if c.key == keys.owner_head_key("w")]
    if ops[0].key != keys.owner_head_key("w") or not expected or expected[0] is None:
        return False
    before, after = Head.from_bytes(expected[0]), Head.from_bytes(ops[0].value)
    return (
        before.holder is not None
        and after.holder is not None
        and (before.epoch, before.slot, before.record) == (after.epoch, after.slot, after.record)
        and after.holder.expires_at >= before.holder.expires_at
    )
