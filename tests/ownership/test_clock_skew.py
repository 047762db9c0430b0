"""An engine whose clock runs ahead of the store's takes over no claim and fires no timer early.

On DynamoDB (moto, in-process and over HTTP) the store's clock is the ``Date`` header of its
answers, which moto stamps with the real time; engines here run on the real clock plus an
offset. Memory and SQLite have no clock of their own, so there the behaviour is unchanged: a
clock far enough ahead still judges a healthy claim expired (the documented assumption).

Claim timing is the default (ttl 30 s, renew 5 s): an engine 41 s ahead judges a claim just
written expired (30 + 2 x 5 < 41).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ownership_support import GRACE, TTL, Opener, holder_of, layout_2, make_engine

from weft_serverless import (
    ClockSkewDetected,
    ConfigurationError,
    Engine,
    EngineLeaseUnavailableError,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.storage.dynamodb_clock import ClockEstimator

AHEAD = TTL + GRACE + 1  # 41 s: a claim written now looks expired to this engine


@pytest.fixture
def storage_factory(storage_factory: Opener, request: pytest.FixtureRequest) -> Opener:
    """These tests read the holder item and the claims index (the claims-index scan's clock check).
    They run on a store of layout 2, which this release keeps driving as it was (ADR
    0056); layout 3, where the head holds the claim, has its own tests
    (``test_claim_in_head.py``)."""
    if request.node.originalname in BY_THE_INDEX:
        return layout_2(storage_factory)
    return storage_factory


BY_THE_INDEX = {
    "test_an_engine_ahead_of_the_store_does_not_depose_a_healthy_owner",
    "test_with_synchronised_clocks_an_expired_claim_is_still_taken_over",
    "test_a_lead_within_the_bound_changes_nothing",
    "test_the_bound_is_configurable_and_the_check_can_be_turned_off",
    "test_an_engine_behind_the_store_is_logged_and_still_takes_over",
    "test_an_activity_in_flight_runs_once_when_an_engine_ahead_runs_maintenance_meanwhile",
}


def _sleeper(ctx: Any, _: Any) -> Iterator[Any]:
    yield ctx.sleep("60s")
    return "slept"


FLOWS = {"sleeper": workflow("sleeper").execute(_sleeper)}


def real(offset: float = 0.0) -> Callable[[], float]:
    return lambda: time.time() + offset


def has_clock(storage_backend: str) -> bool:
    return storage_backend.startswith("dynamodb")


def caught_skew(action: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = action()
    return result, [w for w in seen if issubclass(w.category, ClockSkewDetected)]


def test_an_engine_ahead_of_the_store_does_not_depose_a_healthy_owner(
    storage_factory: Opener, storage_backend: str
) -> None:
    owner = make_engine(storage_factory, FLOWS, "owner", real())
    owner.start("sleeper", id="w")  # parked on its sleep; the claim is held and fresh
    storage = storage_factory()
    held = holder_of(storage, "w")
    assert held is not None and held["engine_id"] == "owner"

    ahead = make_engine(storage_factory, FLOWS, "ahead", real(AHEAD), recover=False)
    report, skew_warnings = caught_skew(ahead.run_maintenance)

    counters = ahead.runtime.metrics.counters
    if has_clock(storage_backend):
        assert report.parts["claims_reclaimed"] == 0
        assert holder_of(storage, "w") == held
        assert counters["clock_skew.takeovers_refused"] == 1
        assert "claim_attempts.takeover" not in counters
        assert skew_warnings and "takeover refused" in str(skew_warnings[0].message)
        assert AHEAD - 3 < counters["clock_skew_ms"] / 1000 < AHEAD + 3
    else:  # no store clock to compare with: the assumption is documented, not checked
        assert report.parts["claims_reclaimed"] == 1
        assert holder_of(storage, "w")["engine_id"] == "ahead"  # type: ignore[index]
        assert skew_warnings == []
        assert "clock_skew_ms" not in counters


def test_with_synchronised_clocks_an_expired_claim_is_still_taken_over(
    storage_factory: Opener,
) -> None:
    """The owner claimed it 45 s ago (its clock then) and died; a synchronised engine takes over."""
    dead = make_engine(storage_factory, FLOWS, "dead", real(-45))
    dead.start("sleeper", id="w")
    taker = make_engine(storage_factory, FLOWS, "taker", real(), recover=False)
    report, skew_warnings = caught_skew(taker.run_maintenance)
    assert report.parts["claims_reclaimed"] == 1
    assert holder_of(storage_factory(), "w")["engine_id"] == "taker"  # type: ignore[index]
    assert skew_warnings == []
    assert "clock_skew.takeovers_refused" not in taker.runtime.metrics.counters


def test_an_engine_ahead_of_the_store_fires_no_timer_early(
    storage_factory: Opener, storage_backend: str
) -> None:
    """``sleep(60)`` started now: an engine 61 s ahead would end it at once without the check."""
    starter = Engine.create(storage_factory(), FLOWS, background_tasks="manual", clock=real())
    starter.start("sleeper", id="w")
    ahead = Engine.create(
        storage_factory(), FLOWS, background_tasks="manual", clock=real(61), recover=False
    )
    report, skew_warnings = caught_skew(ahead.run_maintenance)
    if has_clock(storage_backend):
        assert report.timers_fired == 0
        assert ahead.describe("w").status == "running"
        assert ahead.runtime.metrics.counters["clock_skew.passes_held_back"] == 1
        assert skew_warnings and "timers fire by the store's clock" in str(skew_warnings[0].message)
    else:
        assert report.timers_fired == 1
        assert ahead.describe("w").status == "completed"
        assert skew_warnings == []


def test_a_lead_within_the_bound_changes_nothing(storage_factory: Opener) -> None:
    owner = make_engine(storage_factory, FLOWS, "owner", real(-45))
    owner.start("sleeper", id="w")
    near = make_engine(storage_factory, FLOWS, "near", real(3), recover=False)  # bound: 5 s
    report, skew_warnings = caught_skew(near.run_maintenance)
    assert report.parts["claims_reclaimed"] == 1
    assert skew_warnings == []


def test_the_bound_is_configurable_and_the_check_can_be_turned_off(
    storage_factory: Opener,
) -> None:
    owner = make_engine(storage_factory, FLOWS, "owner", real())
    owner.start("sleeper", id="w")
    off = make_engine(
        storage_factory, FLOWS, "off", real(AHEAD), recover=False, max_clock_skew=math.inf
    )
    report, skew_warnings = caught_skew(off.run_maintenance)
    assert report.parts["claims_reclaimed"] == 1  # the operator chose to trust the clocks
    assert skew_warnings == []


def test_a_store_lease_is_not_taken_from_a_healthy_holder_by_an_engine_ahead(
    storage_factory: Opener, storage_backend: str
) -> None:
    make_engine(storage_factory, FLOWS, "holder", real(), ownership="lease")
    if has_clock(storage_backend):
        with (
            pytest.warns(ClockSkewDetected, match="the lease: takeover refused"),
            pytest.raises(EngineLeaseUnavailableError, match="held by engine 'holder'"),
        ):
            make_engine(storage_factory, FLOWS, "ahead", real(AHEAD), ownership="lease")
    else:
        make_engine(storage_factory, FLOWS, "ahead", real(AHEAD), ownership="lease")
        assert decode_holder(storage_factory())["engine_id"] == "ahead"


def decode_holder(storage: Storage) -> dict[str, Any]:
    from weft_serverless.codec import decode

    data = storage.get(keys.meta_key(keys.LEASE_HOLDER))
    assert data is not None
    holder: dict[str, Any] = decode(data)
    return holder


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5", True])
def test_a_bad_bound_is_refused_before_anything_is_written(storage: Storage, bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_clock_skew"):
        Engine.create(storage, FLOWS, background_tasks="manual", max_clock_skew=bad)  # type: ignore[arg-type]
    assert list(storage.scan(keys.META_PARTITION)) == []


# -- the estimate ----------------------------------------------------------------------------


def answer(date: str | None) -> dict[str, Any]:
    headers = {} if date is None else {"date": date}
    return {"ResponseMetadata": {"HTTPHeaders": headers}}


def test_the_date_header_bounds_the_offset_and_later_answers_narrow_it() -> None:
    wall = [1_000_000.0]
    est = ClockEstimator(wall=lambda: wall[0])
    assert est.offset() is None
    # The store said 1000010 (so it was in [1000010, 1000011)) between our 1000000.0 and .2
    est.observe(answer("Mon, 12 Jan 1970 13:46:50 GMT"), 1_000_000.0, 1_000_000.2)
    first = est.offset()
    assert first is not None
    assert (first.low, first.high) == pytest.approx((9.8, 11.0))
    # A second later the store says 1000011 again, seen between 1000000.9 and 1000001.0
    est.observe(answer("Mon, 12 Jan 1970 13:46:51 GMT"), 1_000_000.9, 1_000_001.0)
    narrowed = est.offset()
    assert narrowed is not None
    assert (narrowed.low, narrowed.high) == pytest.approx((10.0, 11.0))
    est.observe(answer(None), 0, 0)  # no header: nothing learnt
    est.observe(answer("not a date"), 0, 0)
    assert est.offset() == narrowed


def test_a_stepped_clock_restarts_the_estimate_and_an_old_one_expires() -> None:
    wall = [1_000_000.0]
    est = ClockEstimator(wall=lambda: wall[0])
    est.observe(answer("Mon, 12 Jan 1970 13:46:40 GMT"), 1_000_000.0, 1_000_000.1)
    # Our clock stepped back 100 s: bounds that cannot both hold; the new answer wins.
    est.observe(answer("Mon, 12 Jan 1970 13:46:41 GMT"), 999_901.0, 999_901.1)
    stepped = est.offset()
    assert stepped is not None and stepped.low == pytest.approx(99.9)
    wall[0] += 400  # nothing heard for longer than the window: no estimate
    assert est.offset() is None


def test_dynamodb_reads_its_clock_from_answers_already_made(
    storage_factory: Opener, storage_backend: str
) -> None:
    """No request on any hot path: after any answer the offset is free; with none, one read."""
    from weft_serverless.storage.dynamodb import DynamoDBStorage

    storage = storage_factory()
    if not has_clock(storage_backend):
        assert storage.clock_offset() is None
        return
    assert isinstance(storage, DynamoDBStorage)
    before = storage.meter.snapshot().requests
    offset = storage.clock_offset()  # nothing heard yet: exactly one read to hear it
    assert storage.meter.snapshot().requests == before + 1
    assert offset is not None and offset.low <= 0.5 and offset.high >= -0.5
    assert offset.high - offset.low <= 1.5
    storage.put(keys.meta_key("x"), b"1")
    before = storage.meter.snapshot().requests
    assert storage.clock_offset() is not None
    assert storage.meter.snapshot().requests == before


def test_an_engine_behind_the_store_is_logged_and_still_takes_over(
    storage_factory: Opener, storage_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind, an engine only takes over late; it is told that its own claims are at risk."""
    dead = make_engine(storage_factory, FLOWS, "dead", real(-45 - 60))
    dead.start("sleeper", id="w")
    behind = make_engine(storage_factory, FLOWS, "behind", real(-60), recover=False)
    with caplog.at_level("WARNING", "weft_serverless.engine"):
        report = behind.run_maintenance()
    assert report.parts["claims_reclaimed"] == 1
    counters = behind.runtime.metrics.counters
    if has_clock(storage_backend):
        assert counters["clock_skew.passes_behind"] == 1
        assert "behind the store's" in caplog.text
    else:
        assert "clock_skew.passes_behind" not in counters


def test_an_activity_in_flight_runs_once_when_an_engine_ahead_runs_maintenance_meanwhile(
    storage_factory: Opener, storage_backend: str
) -> None:
    """The campaign's case: mid-activity, an engine 41 s ahead runs a pass. On a store with a
    clock the owner keeps its claim, the activity runs once and the owner commits it."""
    calls: list[str] = []
    engines: dict[str, Engine] = {}

    def work() -> str:
        calls.append("work")
        if len(calls) == 1:  # the other engine's pass lands while this attempt runs
            engines["ahead"].run_maintenance()
        return "done"

    def flow(ctx: Any, _: Any) -> Iterator[Any]:
        return (yield ctx.run("work"))

    flows = {"flow": workflow("flow").activities(work=work).execute(flow)}
    owner = make_engine(storage_factory, flows, "owner", real())
    engines["ahead"] = make_engine(storage_factory, flows, "ahead", real(AHEAD), recover=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        owner.start("flow", id="w")
    if has_clock(storage_backend):
        assert calls == ["work"]
        assert owner.describe("w").status == "completed"
        assert "claim_attempts.deposed" not in owner.runtime.metrics.counters
    else:  # the documented assumption broken on a store without a clock: fencing keeps one
        assert calls == ["work", "work"]
        assert owner.runtime.metrics.counters["claim_attempts.deposed"] == 1
