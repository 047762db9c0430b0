"""Construction gates of the fencing modes: checked by ``Engine.create`` before any recovery.

Gate 1: ``lease`` and ``workflow-lease`` need a storage with conditional batches. Gate 2: the
first fencing-mode engine on a store writes a store-wide mode marker ``{mode, established_at}``
(CAS on absent); an engine of another mode, ``none`` included, then fails with
``OwnershipModeMismatchError(configured_mode, stored_mode, established_at)``; mode ``none``
reads the marker but never writes one. Timing: renew interval < ttl and ttl >= 3 x renew
interval, checked before the storage is touched at all.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Generator
from typing import Any

import pytest
from ownership_support import (
    T0,
    Calls,
    Journal,
    Opener,
    RecordingStorage,
    make_engine,
    mode_marker,
)

from weft_serverless import ConfigurationError, Engine, workflow
from weft_serverless.engine.ownership import PARK_LAYOUT
from weft_serverless.engine.ownership.base import marker_mode
from weft_serverless.errors import OwnershipModeMismatchError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Capabilities
from weft_serverless.testing import SimulatedCrash, VirtualClock

FENCING_MODES = ["lease", "workflow-lease"]
Gen = Generator[Any, Any, Any]


class WithoutConditionalBatches(RecordingStorage):
    """A handle on the same store that reports no conditional-batch support."""

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(self.inner.capabilities(), conditional_batch=False)


def stored(mode: str) -> str:
    """The marker a fresh store gets for ``mode``: workflow-lease stores are set up with the
    run-head layout (ADR 0037), which engines of earlier releases refuse."""
    return PARK_LAYOUT if mode == "workflow-lease" else mode


def dying_flow(calls: Calls) -> dict[str, Any]:
    """``flow``: one activity ``a``, whose first call kills the engine running it."""
    died = threading.Event()

    def a(x: int) -> int:
        calls.add("a", x)
        if not died.is_set():
            died.set()
            raise SimulatedCrash("engine died")
        return x

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("a", x)
        return y

    return {"flow": workflow("flow").activities(a=a).execute(flow)}


def crashed_run(storage_factory: Opener, clock: VirtualClock, calls: Calls) -> dict[str, Any]:
    """A store holding one ``running`` workflow whose engine (mode ``none``) died mid-activity:
    any engine that recovers it re-runs activity ``a``."""
    flows = dying_flow(calls)
    first = Engine.create(
        storage_factory(), flows, ownership="none", background_tasks="manual", clock=clock
    )
    with pytest.raises(SimulatedCrash):
        first.start("flow", 1, id="w")
    assert calls.count("a") == 1
    return flows


@pytest.mark.parametrize("mode", FENCING_MODES)
def test_fencing_modes_need_conditional_batches(storage_factory: Opener, mode: str) -> None:
    """Gate 1: a storage without conditional batches is rejected with a ``ConfigurationError``
    naming the mode, before any write (no mode marker); mode ``none`` accepts that storage."""
    journal = Journal()
    storage = WithoutConditionalBatches(storage_factory(), "e1", journal)
    with pytest.raises(ConfigurationError, match=mode):
        Engine.create(storage, {}, ownership=mode, background_tasks="manual", clock=VirtualClock())  # type: ignore[arg-type]
    assert journal.writes == []
    assert mode_marker(storage_factory()) is None
    Engine.create(storage, {}, ownership="none", background_tasks="manual").close()


@pytest.mark.parametrize("mode", FENCING_MODES)
def test_first_fencing_engine_establishes_the_mode_marker_once(
    storage_factory: Opener, mode: str
) -> None:
    """Gate 2: the first fencing-mode engine writes ``{mode, established_at}``; a later engine
    of the same mode is accepted and leaves the marker as it was."""
    clock = VirtualClock()
    make_engine(storage_factory, {}, "e1", clock, ownership=mode).close()
    marker = {"mode": stored(mode), "established_at": T0}
    assert mode_marker(storage_factory()) == marker
    clock.advance(100)
    make_engine(storage_factory, {}, "e2", clock, ownership=mode).close()
    assert mode_marker(storage_factory()) == marker


@pytest.mark.parametrize(("first", "second"), [FENCING_MODES, FENCING_MODES[::-1]])
def test_mismatched_fencing_mode_is_rejected(
    storage_factory: Opener, first: str, second: str
) -> None:
    """Gate 2: an engine whose mode differs from the stored marker fails with
    ``OwnershipModeMismatchError`` carrying the configured mode, the stored mode and when it was
    established (a ``ConfigurationError``), and writes nothing: no lease, no marker change."""
    clock, journal = VirtualClock(), Journal()
    make_engine(storage_factory, {}, "e1", clock, ownership=first).close()
    clock.advance(60)
    with pytest.raises(OwnershipModeMismatchError) as raised:
        make_engine(storage_factory, {}, "e2", clock, ownership=second, journal=journal)
    error = raised.value
    assert isinstance(error, ConfigurationError)
    assert (error.configured_mode, error.stored_mode, error.established_at) == (second, first, T0)
    assert first in str(error) and second in str(error)
    assert journal.writes == []
    store = storage_factory()
    assert mode_marker(store) == {"mode": stored(first), "established_at": T0}
    if second == "lease":
        assert store.get(keys.meta_key(keys.LEASE_HOLDER)) is None


@pytest.mark.parametrize("mode", FENCING_MODES)
def test_mode_none_writes_no_marker_and_is_refused_on_a_fenced_store(
    storage_factory: Opener, mode: str
) -> None:
    """Mode ``none`` writes no marker on a fresh store; on a store whose marker names a
    fencing mode it fails with ``OwnershipModeMismatchError("none", mode, established_at)``
    and writes nothing."""
    clock, journal = VirtualClock(), Journal()
    make_engine(storage_factory, {}, "n1", clock, ownership="none").close()
    assert mode_marker(storage_factory()) is None
    make_engine(storage_factory, {}, "e1", clock, ownership=mode).close()
    clock.advance(60)
    with pytest.raises(OwnershipModeMismatchError) as raised:
        make_engine(storage_factory, {}, "n2", clock, ownership="none", journal=journal)
    error = raised.value
    assert (error.configured_mode, error.stored_mode, error.established_at) == ("none", mode, T0)
    assert journal.writes == []
    assert mode_marker(storage_factory()) == {"mode": stored(mode), "established_at": T0}


@pytest.mark.parametrize("mode", FENCING_MODES)
def test_mode_none_is_refused_before_recovering_a_run_a_live_owner_holds(
    storage_factory: Opener, mode: str
) -> None:
    """A fencing engine dies inside an activity; its lease or claim is still live. A mode
    ``none`` engine then created on that store is refused before recovering anything: the
    activity does not run again and nothing is written."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = dying_flow(calls)
    owner = make_engine(storage_factory, flows, "owner", clock, ownership=mode)
    with pytest.raises(SimulatedCrash):
        owner.start("flow", 1, id="w")
    with pytest.raises(OwnershipModeMismatchError):
        make_engine(storage_factory, flows, "n1", clock, ownership="none", journal=journal)
    assert calls.count("a") == 1
    assert journal.writes == []


@pytest.mark.parametrize("mode", FENCING_MODES)
def test_fencing_engine_takes_over_a_store_first_used_by_mode_none(
    storage_factory: Opener, mode: str
) -> None:
    """The upgrade path (docs/decisions/0011): a store used only by mode ``none`` has no
    marker, so a fencing engine is accepted there. It establishes its mode, then recovers the
    run a dead ``none`` engine left running, fenced; a ``none`` engine is refused afterwards."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = crashed_run(storage_factory, clock, calls)
    clock.advance(5)
    engine = make_engine(storage_factory, flows, "e1", clock, ownership=mode, journal=journal)
    assert mode_marker(storage_factory()) == {"mode": stored(mode), "established_at": T0 + 5}
    assert engine.get_handle("w").result() == 1 and calls.count("a") == 2
    fence_key = (  # workflow-lease: the head the run gets at its first claim (ADR 0037)
        keys.owner_head_key("w") if mode == "workflow-lease" else keys.meta_key(keys.LEASE_EPOCH)
    )
    recovered = [w for w in journal.by("e1", committed=True) if w.puts(keys.state_key("w"))]
    assert recovered and all(w.condition_on(fence_key) is not None for w in recovered)
    engine.close()
    mark = journal.mark()
    with pytest.raises(OwnershipModeMismatchError):
        make_engine(storage_factory, flows, "n2", clock, ownership="none", journal=journal)
    assert journal.since(mark) == []


def test_engines_of_two_modes_racing_on_a_fresh_store_establish_one_mode(
    storage_factory: Opener,
) -> None:
    """The marker is a CAS on absent: two engines of different fencing modes created at once on
    a fresh store end with one marker; the engine of that mode starts, the other fails with
    ``OwnershipModeMismatchError`` naming the winner's mode."""
    clock = VirtualClock()
    barrier = threading.Barrier(2)
    outcome: dict[str, BaseException | None] = {}

    def create(mode: str) -> None:
        barrier.wait()
        try:
            make_engine(storage_factory, {}, mode, clock, ownership=mode).close()
            outcome[mode] = None
        except BaseException as exc:
            outcome[mode] = exc

    threads = [threading.Thread(target=create, args=(m,)) for m in FENCING_MODES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    marker = mode_marker(storage_factory())
    assert marker is not None
    winner = marker_mode(marker["mode"])
    loser = next(m for m in FENCING_MODES if m != winner)
    assert outcome[winner] is None
    error = outcome[loser]
    assert isinstance(error, OwnershipModeMismatchError)
    assert (error.configured_mode, error.stored_mode) == (loser, winner)


def test_mode_mismatch_is_detected_before_anything_is_recovered(storage_factory: Opener) -> None:
    """The gates run before recovery: an engine of the wrong mode on a store holding a run
    left ``running`` by a dead engine fails without re-running its activity or writing."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = crashed_run(storage_factory, clock, calls)
    make_engine(storage_factory, {}, "e0", clock, ownership="lease").close()
    with pytest.raises(OwnershipModeMismatchError):
        make_engine(
            storage_factory, flows, "e1", clock, ownership="workflow-lease", journal=journal
        )
    assert calls.count("a") == 1
    assert journal.writes == []


TIMING_OPTIONS = {
    "lease": ("lease_ttl", "lease_renew_interval"),
    "workflow-lease": ("workflow_claim_ttl", "workflow_claim_renew_interval"),
}
BAD_TIMINGS = [
    pytest.param(5.0, 5.0, id="renew-equals-ttl"),
    pytest.param(4.0, 5.0, id="renew-over-ttl"),
    pytest.param(14.9, 5.0, id="ttl-under-3x-renew"),
    pytest.param(9.0, 4.0, id="ttl-2.25x-renew"),
    pytest.param(0.0, 5.0, id="zero-ttl"),
    pytest.param(30.0, 0.0, id="zero-renew"),
    pytest.param(30.0, -1.0, id="negative-renew"),
]


@pytest.mark.parametrize("mode", FENCING_MODES)
@pytest.mark.parametrize(("ttl", "renew"), BAD_TIMINGS)
def test_bad_timings_are_rejected_before_the_storage_is_touched(
    storage_factory: Opener, mode: str, ttl: float, renew: float
) -> None:
    """Timing rules (renew interval < ttl, ttl >= 3 x renew interval, both > 0) fail with a
    ``ConfigurationError`` before a single storage request: no marker, no lease, no recovery
    of the run a dead engine left running."""
    clock, calls, journal = VirtualClock(), Calls(), Journal()
    flows = crashed_run(storage_factory, clock, calls)
    handle = RecordingStorage(storage_factory(), "e1", journal)
    ttl_option, renew_option = TIMING_OPTIONS[mode]
    with pytest.raises(ConfigurationError):
        Engine.create(
            handle,
            flows,
            ownership=mode,  # type: ignore[arg-type]
            background_tasks="manual",
            clock=clock,
            **{ttl_option: ttl, renew_option: renew},
        )
    assert handle.stats.requests() == 0
    assert journal.writes == []
    assert calls.count("a") == 1
    assert mode_marker(storage_factory()) is None


@pytest.mark.parametrize("mode", FENCING_MODES)
def test_ttl_of_exactly_three_renew_intervals_is_accepted(
    storage_factory: Opener, mode: str
) -> None:
    """The boundary: ttl == 3 x renew interval satisfies ``ttl >= 3 x renew``."""
    ttl_option, renew_option = TIMING_OPTIONS[mode]
    engine = make_engine(
        storage_factory,
        {},
        "e1",
        VirtualClock(),
        ownership=mode,
        **{ttl_option: 15.0, renew_option: 5.0},
    )
    assert engine.runtime.fence.renew_interval == 5.0
    engine.close()
