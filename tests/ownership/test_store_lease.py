"""``ownership="lease"``: one store-wide holder and epoch, fencing every write of the engine.

The lease (holder ``{engine_id, epoch, expires_at}`` and an 8-byte epoch in the ``meta``
partition) is acquired at construction before recovery, renewed by maintenance once the renew
interval has passed, and released at ``close()``. A second engine fails with
``EngineLeaseUnavailableError`` while it is held (``expires_at >= now``); once it lapses the next
engine takes it at epoch + 1, and the deposed engine stops itself with ``EngineLeaseLostError``
at its next write, which never lands.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any

import pytest
from ownership_support import (
    RENEW,
    T0,
    TTL,
    Calls,
    Journal,
    Opener,
    landed_after,
    make_engine,
)

from weft_serverless import ConfigurationError, Engine, workflow
from weft_serverless.codec import decode
from weft_serverless.engine.ownership import pack_epoch, unpack_epoch
from weft_serverless.errors import EngineLeaseLostError, EngineLeaseUnavailableError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Storage
from weft_serverless.testing import SimulatedCrash, VirtualClock

Gen = Generator[Any, Any, Any]
EPOCH_KEY = keys.meta_key(keys.LEASE_EPOCH)
HOLDER_KEY = keys.meta_key(keys.LEASE_HOLDER)


def lease(storage: Storage) -> tuple[int, dict[str, Any] | None]:
    """(epoch, holder) of the store-wide lease."""
    holder = storage.get(HOLDER_KEY)
    return unpack_epoch(storage.get(EPOCH_KEY)), None if holder is None else dict(decode(holder))


def flows_of(calls: Calls) -> dict[str, Any]:
    """``flow``: a -> sleep 10 -> b -> wait "go"; ``crashy``: a (dies in its first attempt)."""
    died = threading.Event()

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("a", x)
        yield ctx.sleep(10)
        z = yield ctx.run("b", y)
        g = yield ctx.wait_for_signal("go")
        return z + g

    def dies_once(x: int) -> int:
        calls.add("dies_once", x)
        if not died.is_set():
            died.set()
            raise SimulatedCrash("the engine died inside the activity")
        return x * 2

    def crashy(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("dies_once", x)
        return y

    return {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda x: x + 1), b=calls.recorder("b"))
        .execute(flow),
        "crashy": workflow("crashy").activities(dies_once=dies_once).execute(crashy),
    }


def lease_engine(
    storage_factory: Opener,
    name: str,
    clock: VirtualClock,
    flows: dict[str, Any],
    journal: Journal | None = None,
    **options: Any,
) -> Engine:
    return make_engine(
        storage_factory, flows, name, clock, ownership="lease", journal=journal, **options
    )


def test_second_engine_gets_lease_unavailable_and_recovers_nothing(storage_factory: Opener) -> None:
    """One holder: while the lease is held a second engine fails with
    ``EngineLeaseUnavailableError(held_by, expires_at)`` and neither writes nor recovers."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = flows_of(calls)
    e1 = lease_engine(storage_factory, "e1", clock, flows)
    with pytest.raises(SimulatedCrash):
        e1.start("crashy", 1, id="w")  # e1's process dies; its lease stays until it lapses
    with pytest.raises(EngineLeaseUnavailableError) as raised:
        lease_engine(storage_factory, "e2", clock, flows, journal)
    assert raised.value.held_by == "e1" and raised.value.expires_at == T0 + TTL
    assert journal.writes == [] and calls.count("dies_once") == 1
    assert lease(storage_factory()) == (1, {"engine_id": "e1", "epoch": 1, "expires_at": T0 + TTL})


def test_lease_is_taken_only_after_it_lapses_and_before_recovery(storage_factory: Opener) -> None:
    """The lease is held through ``expires_at`` inclusive; just after, the next engine acquires
    epoch 2 as its first write, then recovers the dead engine's run with every write fenced on
    epoch 2."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = flows_of(calls)
    e1 = lease_engine(storage_factory, "e1", clock, flows)
    with pytest.raises(SimulatedCrash):
        e1.start("crashy", 1, id="w")
    clock.advance(TTL)  # exactly expires_at: still held
    with pytest.raises(EngineLeaseUnavailableError):
        lease_engine(storage_factory, "e2", clock, flows, journal)
    assert journal.writes == []

    clock.advance(0.001)
    e2 = lease_engine(storage_factory, "e2", clock, flows, journal)
    writes = landed_after(journal, "e2", 0)
    assert writes[0].puts(EPOCH_KEY) and writes[0].puts(HOLDER_KEY)
    assert writes[0].condition_on(EPOCH_KEY) == Condition(EPOCH_KEY, pack_epoch(1))
    assert lease(storage_factory())[0] == 2
    assert e2.get_handle("w").result() == 2 and calls.count("dies_once") == 2
    fence = Condition(EPOCH_KEY, pack_epoch(2))
    assert all(fence in w.conditions for w in writes[1:])


def test_lease_is_renewed_by_maintenance_once_due(storage_factory: Opener) -> None:
    """Maintenance renews the lease once the renew interval has passed (``parts["lease_renewed"]``),
    moving ``expires_at`` to ``now + ttl`` with the same epoch; a renewed lease stays held past
    its first expiry."""
    clock, calls = VirtualClock(), Calls()
    flows = flows_of(calls)
    e1 = lease_engine(storage_factory, "e1", clock, flows)
    store = storage_factory()
    before = store.get(HOLDER_KEY)
    clock.advance(RENEW - 0.1)
    assert "lease_renewed" not in e1.run_maintenance().parts
    assert store.get(HOLDER_KEY) == before
    clock.advance(0.1)
    assert e1.run_maintenance().parts["lease_renewed"] == 1
    assert lease(store) == (1, {"engine_id": "e1", "epoch": 1, "expires_at": T0 + RENEW + TTL})
    clock.advance(TTL - RENEW + 1)  # past the first expiry, before the renewed one
    with pytest.raises(EngineLeaseUnavailableError):
        lease_engine(storage_factory, "e2", clock, flows)


def test_close_releases_the_lease_and_each_acquisition_takes_the_next_epoch(
    storage_factory: Opener,
) -> None:
    """``close()`` deletes the holder and keeps the epoch, so the next engine acquires at once
    (same instant) at epoch + 1 and recovers the runs the previous one left."""
    clock, calls = VirtualClock(), Calls()
    flows = flows_of(calls)
    e1 = lease_engine(storage_factory, "e1", clock, flows)
    e1.start("flow", 1, id="w")  # a ran, parked on the sleep
    e1.close()
    store = storage_factory()
    assert lease(store) == (1, None)
    e2 = lease_engine(storage_factory, "e2", clock, flows)
    assert lease(store) == (2, {"engine_id": "e2", "epoch": 2, "expires_at": T0 + TTL})
    clock.advance(10)
    e2.run_maintenance()
    e2.signal("w", "go", 100)
    assert e2.get_handle("w").result() == 102
    assert calls.count("a") == 1 and calls.count("b") == 1
    e2.close()
    lease_engine(storage_factory, "e3", clock, flows).close()
    assert lease(store)[0] == 3


Entry = Callable[[Engine], object]
ENTRY_POINTS: dict[str, Entry] = {
    "maintenance": lambda e: e.run_maintenance(),
    "resume": lambda e: e.resume("w"),
    "start": lambda e: e.start("flow", 5, id="new"),
    "signal": lambda e: e.signal("w", "go", 1),
    "cancel": lambda e: e.cancel("w"),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_deposed_engine_stops_itself_and_lands_no_write(
    storage_factory: Opener, entry: str
) -> None:
    """Every engine write is fenced on the lease epoch: an engine whose lease lapsed and was
    taken (epoch 2) fails its next write with ``EngineLeaseLostError`` whatever the entry point,
    lands nothing, and stops itself (later calls are refused)."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = flows_of(calls)
    e1 = lease_engine(storage_factory, "e1", clock, flows, journal)
    e1.start("flow", 1, id="w")  # parked on the sleep, which falls due below
    clock.advance(TTL + 0.001)  # e1 paused: no renewal
    lease_engine(storage_factory, "e2", clock, flows, recover=False)
    mark = journal.mark()
    with pytest.raises(EngineLeaseLostError):
        ENTRY_POINTS[entry](e1)
    assert landed_after(journal, "e1", mark) == []
    assert e1.runtime.closed
    with pytest.raises((EngineLeaseLostError, ConfigurationError)):
        e1.start("flow", 6, id="later")
    assert landed_after(journal, "e1", mark) == []
    assert storage_factory().get(keys.state_key("new")) is None


def test_every_write_of_the_lease_holder_is_fenced_on_its_epoch(storage_factory: Opener) -> None:
    """All engine-owned writes carry the lease-epoch condition, timer cleanup included: over a
    start, a fired sleep timer, a signal and the completion, every write of the holder after
    its acquire is conditioned on its epoch (renewals on its holder bytes, epoch included)."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = flows_of(calls)
    e1 = lease_engine(storage_factory, "e1", clock, flows, journal)
    mark = journal.mark()
    e1.start("flow", 1, id="w")
    clock.advance(10)
    e1.run_maintenance()
    e1.signal("w", "go", 1)
    assert e1.get_handle("w").result() == 3
    fence = Condition(EPOCH_KEY, pack_epoch(1))
    # A renewal is conditioned on the holder bytes, which embed the epoch.
    unfenced = [
        w
        for w in journal.since(mark)
        if fence not in w.conditions and w.condition_on(HOLDER_KEY) is None
    ]
    assert unfenced == [], [(w.engine, w.ops) for w in unfenced]
