"""Schedules (issue 15) on every backend, in virtual time: fires start runs named by their
nominal time, overlap policies, catch-up, jitter, start/end, the handle's moves, bad input,
and several engines firing one tick (docs/api.md, Schedules; ADR 0024)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from feature_support import Opener

from weft_serverless import (
    Engine,
    InvalidScheduleError,
    ScheduleAlreadyExistsError,
    ScheduleNotFoundError,
    UnknownWorkflowTypeError,
    workflow,
)
from weft_serverless.engine.schedules.spec import MAX_FIRES_COUNTED
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Storage
from weft_serverless.testing import DelegatingStorage, SimulatedCrash, VirtualClock

T0 = 1767225600.0  # 2026-01-01T00:00:00Z, a multiple of every interval used here
MIN = 60.0


def _report(ctx: Any, input: Any) -> Any:
    return input
    yield  # a generator that ends at once


def _long(ctx: Any, input: Any) -> Any:
    yield ctx.wait_for_signal("done")
    return input


WORKFLOWS = {
    "report": workflow("report").execute(_report),
    "long": workflow("long").execute(_long),
}


def _engine(storage_factory: Opener, clock: VirtualClock, **options: Any) -> Engine:
    return Engine.create(
        storage_factory(), WORKFLOWS, background_tasks="manual", clock=clock, **options
    )


def _tick(engine: Engine, clock: VirtualClock, seconds: float) -> None:
    clock.advance(seconds)
    engine.run_maintenance(clock())


def _rid(schedule_id: str, at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return f"{schedule_id}-{moment:%Y%m%dT%H%M%SZ}"


def _schedule_timers(storage: Any) -> list[str]:
    found = []
    for shard in range(keys.TIMER_SHARDS):
        for sort, _ in storage.scan(keys.timer_partition(shard)):
            if sort.endswith("#schedule"):
                found.append(sort)
    return found


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(T0)


# -- fires ---------------------------------------------------------------------------------


def test_an_interval_schedule_starts_one_run_per_fire_named_by_its_time(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("rep", "report", input={"region": "eu"}, every="15m")
    assert h.describe().next_fire_at == T0 + 15 * MIN
    _tick(engine, clock, 14 * MIN)
    assert engine.list() == []
    _tick(engine, clock, MIN)
    run = _rid("rep", T0 + 15 * MIN)
    assert engine.get_handle(run).result() == {"region": "eu"}
    _tick(engine, clock, 15 * MIN)
    assert engine.describe(_rid("rep", T0 + 30 * MIN)).status == "completed"
    d = h.describe()
    assert (d.fired, d.missed, d.skipped, d.running) == (2, 0, 0, [])
    assert d.last_fire_at == T0 + 30 * MIN
    assert d.next_fire_at == T0 + 45 * MIN
    assert len(_schedule_timers(engine.runtime.storage)) == 1  # only the next fire's


def test_a_cron_schedule_fires_in_its_time_zone(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("nightly", "report", cron="0 2 * * *", timezone="Europe/Berlin")
    first = datetime.datetime(2026, 1, 1, 2, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    assert h.describe().next_fire_at == first == T0 + 1 * 3600  # 02:00 CET = 01:00 UTC
    _tick(engine, clock, 3600)
    assert engine.describe("nightly-20260101T010000Z").status == "completed"
    assert h.describe().next_fire_at == first + 86400


# -- overlap -------------------------------------------------------------------------------


def test_skip_starts_nothing_while_a_previous_run_is_not_terminal(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("s", "long", every="1m", overlap="skip")
    _tick(engine, clock, MIN)
    first = _rid("s", T0 + MIN)
    assert h.describe().running == [first]
    engine.suspend(first)  # suspended holds the slot too
    _tick(engine, clock, MIN)
    assert engine.describe(first).status == "suspended"
    d = h.describe()
    assert (d.fired, d.skipped, d.running) == (1, 1, [first])
    engine.resume(first)
    engine.signal(first, "done")
    _tick(engine, clock, MIN)
    d = h.describe()
    assert (d.fired, d.skipped, d.running) == (2, 1, [_rid("s", T0 + 3 * MIN)])


def test_queue_keeps_one_fire_waiting_and_starts_it_when_the_previous_run_ends(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("q", "long", every="1m", overlap="queue")
    _tick(engine, clock, MIN)
    _tick(engine, clock, MIN)  # queued
    _tick(engine, clock, MIN)  # one fire waits at most: this one is skipped
    d = h.describe()
    assert (d.fired, d.skipped, d.queued_fire_at) == (1, 1, T0 + 2 * MIN)
    engine.signal(_rid("q", T0 + MIN), "done")  # the run ends: its end arms the schedule
    engine.run_maintenance(clock())
    queued = _rid("q", T0 + 2 * MIN)
    assert engine.describe(queued).status == "running"
    d = h.describe()
    assert (d.fired, d.queued_fire_at, d.running) == (2, None, [queued])


def test_cancel_running_cancels_the_previous_run_then_starts(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("c", "long", every="1m", overlap="cancel_running")
    _tick(engine, clock, MIN)
    _tick(engine, clock, MIN)
    assert engine.describe(_rid("c", T0 + MIN)).status == "cancelled"
    assert engine.describe(_rid("c", T0 + 2 * MIN)).status == "running"
    assert h.describe().running == [_rid("c", T0 + 2 * MIN)]


def test_allow_always_starts(storage_factory: Opener, clock: VirtualClock) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("a", "long", every="1m", overlap="allow")
    _tick(engine, clock, MIN)
    _tick(engine, clock, MIN)
    assert h.describe().running == [_rid("a", T0 + MIN), _rid("a", T0 + 2 * MIN)]


# -- catch-up, jitter, start and end -------------------------------------------------------


def test_after_an_outage_one_pass_starts_only_the_most_recent_fire_and_counts_the_rest(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("o", "report", every="15m", catchup_window="5m")
    _tick(engine, clock, 3 * 3600 + 2 * MIN)  # 12 fires due; the last found 2 min late
    assert [s.id for s in engine.list()] == [_rid("o", T0 + 3 * 3600)]
    d = h.describe()
    assert (d.fired, d.missed) == (1, 11)
    assert d.next_fire_at == T0 + 3 * 3600 + 15 * MIN
    engine.run_maintenance(clock())
    assert len(engine.list()) == 1  # no burst on the next pass


def test_a_fire_found_later_than_the_catchup_window_is_missed(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("late", "report", every="15m", catchup_window="5m")
    _tick(engine, clock, 15 * MIN + 6 * MIN)
    assert engine.list() == []
    assert (h.describe().fired, h.describe().missed) == (0, 1)


def test_jitter_delays_each_fire_by_its_own_offset_and_keeps_its_name(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("j", "report", every="1h", jitter="10m")
    timer = _schedule_timers(engine.runtime.storage)[0]
    due = keys.timer_due_of(timer)
    assert T0 + 3600 < due < T0 + 3600 + 600
    _tick(engine, clock, due - T0 - 1)
    assert engine.list() == []
    _tick(engine, clock, 1)
    assert [s.id for s in engine.list()] == [_rid("j", T0 + 3600)]
    other = Engine.create(storage_factory(), WORKFLOWS, background_tasks="manual", clock=clock)
    assert other.get_schedule("j").describe().fired == h.describe().fired == 1


def test_start_at_and_end_at_bound_the_fires(storage_factory: Opener, clock: VirtualClock) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("b", "report", every="10m", start_at=T0 + 3600, end_at=T0 + 3600 + 10 * MIN)
    assert h.describe().next_fire_at == T0 + 3600
    _tick(engine, clock, 3600)
    _tick(engine, clock, 10 * MIN)
    _tick(engine, clock, 10 * MIN)
    assert [s.id for s in engine.list()] == [_rid("b", T0 + 3600), _rid("b", T0 + 4200)]
    assert h.describe().next_fire_at is None
    assert _schedule_timers(engine.runtime.storage) == []


# -- the handle's moves --------------------------------------------------------------------


def test_pause_drops_the_timer_and_resume_fires_from_now(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("p", "report", every="10m")
    h.pause()
    d = h.describe()
    assert (d.paused, d.next_fire_at) == (True, None)
    assert _schedule_timers(engine.runtime.storage) == []
    _tick(engine, clock, 3600)
    assert engine.list() == []
    h.resume()
    assert h.describe().next_fire_at == T0 + 3600 + 10 * MIN
    _tick(engine, clock, 10 * MIN)
    assert [s.id for s in engine.list()] == [_rid("p", T0 + 4200)]
    assert h.describe().missed == 0  # fires while paused are not made up or counted


def test_trigger_starts_a_run_now_and_the_overlap_policy_applies(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("t", "long", every="1d", overlap="skip")
    clock.advance(90.5)
    run = h.trigger()
    assert run is not None and run.id == _rid("t", T0 + 90)[:-1] + "a"  # a manual fire's id
    assert h.trigger() is None  # a fire of its own, skipped: the first run still goes on
    clock.advance(1)
    assert h.trigger() is None
    assert (h.describe().fired, h.describe().skipped) == (1, 2)


def test_update_recomputes_the_next_fire_and_changes_the_input(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("u", "report", input=1, every="1h")
    h.update(cron="*/5 * * * *", input=2, overlap="allow")
    d = h.describe()
    assert (d.cron, d.every, d.overlap, d.next_fire_at) == ("*/5 * * * *", None, "allow", T0 + 300)
    assert len(_schedule_timers(engine.runtime.storage)) == 1
    _tick(engine, clock, 300)
    assert engine.get_handle(_rid("u", T0 + 300)).result() == 2
    _tick(engine, clock, 3600 - 300)
    assert engine.list(status="completed")[-1].id == _rid("u", T0 + 3600)  # the cron's fire


def test_delete_drops_record_and_timer_and_leaves_runs(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    h = engine.schedule("d", "long", every="1m")
    _tick(engine, clock, MIN)
    h.delete()
    assert _schedule_timers(engine.runtime.storage) == []
    with pytest.raises(ScheduleNotFoundError):
        engine.get_schedule("d")
    with pytest.raises(ScheduleNotFoundError):
        h.describe()
    _tick(engine, clock, MIN)
    assert [s.id for s in engine.list()] == [_rid("d", T0 + MIN)]
    assert engine.list_schedules() == []


def test_backfill_starts_the_fires_of_a_past_interval_with_overlap_applied(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    clock.advance(3600)
    allow = engine.schedule("ba", "report", every="15m", overlap="allow")
    started = allow.backfill(T0, T0 + 30 * MIN)
    assert [r.id for r in started] == [_rid("ba", T0 + i * 15 * MIN) for i in range(3)]
    assert allow.backfill(T0, T0 + 30 * MIN) == []  # their runs exist: passed over
    skip = engine.schedule("bs", "long", every="15m", overlap="skip")
    assert [r.id for r in skip.backfill(T0, T0 + 30 * MIN)] == [_rid("bs", T0)]
    assert skip.describe().skipped == 2
    with pytest.raises(InvalidScheduleError):
        skip.backfill(T0, clock() + 1)


def test_get_and_list_schedules(storage_factory: Opener, clock: VirtualClock) -> None:
    engine = _engine(storage_factory, clock)
    engine.schedule("b", "report", every="1h")
    engine.schedule("a", "report", cron="0 * * * *")
    assert [d.id for d in engine.list_schedules()] == ["a", "b"]
    assert engine.get_schedule("a").describe().cron == "0 * * * *"
    with pytest.raises(ScheduleAlreadyExistsError):
        engine.schedule("a", "report", every="1h")
    with pytest.raises(ScheduleNotFoundError):
        engine.get_schedule("zzz")


# -- bad input: a typed error, nothing stored -----------------------------------------------

BAD: list[tuple[dict[str, Any], str]] = [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "not a cron"}, "cron"),
    ({"cron": "0 * * * *", "every": "1h"}, "cron"),
    ({}, "cron"),
    ({"every": "1h", "timezone": "Mars/Olympus"}, "timezone"),
    ({"every": "1h", "overlap": "sometimes"}, "overlap"),
    ({"every": 0}, "every"),
    ({"every": -5}, "every"),
    ({"every": "0.5s"}, "every"),
    ({"every": "1h", "catchup_window": 0}, "catchup_window"),
    ({"every": "1h", "jitter": "soon"}, "jitter"),
    ({"every": "1h", "start_at": T0 + 10, "end_at": T0}, "end_at"),
    ({"every": "1h", "start_at": datetime.datetime(2026, 1, 1)}, "start_at"),
]


@pytest.mark.parametrize(("options", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_schedule_input_is_a_typed_error_and_nothing_is_stored(
    storage_factory: Opener, clock: VirtualClock, options: dict[str, Any], field: str
) -> None:
    engine = _engine(storage_factory, clock)
    before = engine.runtime.storage.stats.snapshot()
    with pytest.raises(InvalidScheduleError) as raised:
        engine.schedule("bad", "report", **options)
    assert raised.value.field == field
    assert raised.value.code == "InvalidScheduleError"
    assert engine.runtime.storage.stats.snapshot().get("writes", 0) == before.get("writes", 0)
    assert engine.list_schedules() == []


def test_bad_update_and_unknown_type_store_nothing(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engine = _engine(storage_factory, clock)
    with pytest.raises(UnknownWorkflowTypeError):
        engine.schedule("x", "nope", every="1h")
    assert engine.list_schedules() == []
    h = engine.schedule("x", "report", every="1h")
    stored = engine.runtime.storage.get(keys.schedule_key("x"))
    for bad in ({"cron": "99 * * * *"}, {"overlap": "never"}, {"every": 0}):
        with pytest.raises(InvalidScheduleError):
            h.update(**bad)
    assert engine.runtime.storage.get(keys.schedule_key("x")) == stored


# -- several engines -----------------------------------------------------------------------


@pytest.mark.parametrize("ownership", ["none", "lease", "workflow-lease"])
def test_several_engines_at_one_tick_start_one_run_per_fire(
    storage_factory: Opener, clock: VirtualClock, ownership: str
) -> None:
    """Each engine's fire batch lands between another's read and its write: every batch is
    conditional on the record read, so exactly one run starts per fire."""
    if ownership == "lease":
        # Under a store-wide lease only the holder writes: the others stand by.
        engines = [_engine(storage_factory, clock, ownership="lease", engine_id="e0")]
    else:
        engines = [
            _engine(storage_factory, clock, ownership=ownership, engine_id=f"e{i}")
            for i in range(3)
        ]
    engines[0].schedule("m", "report", every="1m", overlap="allow")
    for tick in range(1, 4):
        clock.advance(MIN)
        for engine in engines:
            engine.run_maintenance(clock())
        runs = [s.id for s in engines[0].list()]
        assert runs == [_rid("m", T0 + i * MIN) for i in range(1, tick + 1)]
    assert engines[0].get_schedule("m").describe().fired == 3


class _FireHook(DelegatingStorage):
    """Calls ``hook`` (once) when a batch that starts a scheduled run is about to be written
    (``when="before"``) or has been written (``"after"``)."""

    def __init__(self, inner: Storage, when: str, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.when, self.hook, self.fired = when, hook, False

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        starts = any(op.key.partition == keys.SCHEDULE_PARTITION for op in ops) and any(
            op.key.sort == keys.STATE for op in ops
        )
        if starts and not self.fired and self.when == "before":
            self.fired = True
            self.hook()
        ok = self.inner.conditional_batch(conditions, ops)
        if starts and not self.fired and self.when == "after":
            self.fired = True
            self.hook()
        return ok


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_an_engine_racing_between_another_ones_read_and_write_starts_the_only_run(
    storage_factory: Opener, clock: VirtualClock, ownership: str
) -> None:
    other = _engine(storage_factory, clock, ownership=ownership, engine_id="other")
    racing = _FireHook(storage_factory(), "before", lambda: other.run_maintenance(clock()))
    engine = Engine.create(
        racing, WORKFLOWS, background_tasks="manual", clock=clock, ownership=ownership
    )
    h = engine.schedule("r", "report", every="1m", overlap="allow")
    _tick(engine, clock, MIN)
    assert racing.fired
    assert [s.id for s in engine.list()] == [_rid("r", T0 + MIN)]
    assert engine.describe(_rid("r", T0 + MIN)).status == "completed"
    d = h.describe()
    assert (d.fired, d.next_fire_at) == (1, T0 + 2 * MIN)
    assert len(_schedule_timers(engine.runtime.storage)) == 1


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_the_fire_batch_starts_the_run_exactly_once(
    storage_factory: Opener, clock: VirtualClock, when: str
) -> None:
    """Before: nothing landed, the timer stays and the next pass fires. After: the run and
    the advanced record landed with the next timer; the fired timer, not yet deleted, finds
    nothing due when it fires again."""

    def crash() -> None:
        raise SimulatedCrash(f"crash {when} the fire batch")

    crashing = _FireHook(storage_factory(), when, crash)
    doomed = Engine.create(crashing, WORKFLOWS, background_tasks="manual", clock=clock)
    doomed.schedule("x", "report", every="1m")
    clock.advance(MIN)
    with pytest.raises(SimulatedCrash):
        doomed.run_maintenance(clock())
    engine = _engine(storage_factory, clock)
    engine.run_maintenance(clock())
    engine.run_maintenance(clock())
    assert [s.id for s in engine.list()] == [_rid("x", T0 + MIN)]
    assert engine.get_handle(_rid("x", T0 + MIN)).result() is None
    d = engine.get_schedule("x").describe()
    assert (d.fired, d.missed, d.next_fire_at) == (1, 0, T0 + 2 * MIN)
    assert len(_schedule_timers(engine.runtime.storage)) == 1


@pytest.mark.backends("dynamodb-http")  # threads racing real HTTP requests: moto's server only
def test_engines_on_threads_over_http_start_one_run_per_fire(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    engines = [
        _engine(storage_factory, clock, ownership="workflow-lease", engine_id=f"t{i}")
        for i in range(4)
    ]
    engines[0].schedule("th", "report", every="1m", overlap="allow")
    for _ in range(3):
        clock.advance(MIN)
        with ThreadPoolExecutor(len(engines)) as pool:
            list(pool.map(lambda e: e.run_maintenance(clock()), engines))
    runs = sorted(s.id for s in engines[0].list())
    assert runs == [_rid("th", T0 + i * MIN) for i in range(1, 4)]
    assert all(s.status == "completed" for s in engines[0].list())
    assert engines[0].get_schedule("th").describe().fired == 3


# -- daylight saving time (cronsim's Debian rules, ADR 0024) -------------------------------

BERLIN = ZoneInfo("Europe/Berlin")


def _berlin(*parts: int) -> float:
    return datetime.datetime(*parts, tzinfo=BERLIN).timestamp()  # type: ignore[misc]


def _fires(engine: Engine, clock: VirtualClock, until: float) -> list[str]:
    while clock() < until:
        _tick(engine, clock, 10 * MIN)
    return sorted(s.id for s in engine.list())


@pytest.mark.backends("memory", "sqlite")  # pure time arithmetic: the store plays no part
def test_a_daily_fire_in_the_skipped_hour_runs_right_after_the_change(
    storage_factory: Opener,
) -> None:
    clock = VirtualClock(_berlin(2026, 3, 28, 12))
    engine = _engine(storage_factory, clock)
    engine.schedule("dst", "report", cron="30 2 * * *", timezone="Europe/Berlin")
    # 29 March: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist and fires at 03:00 CEST.
    assert _fires(engine, clock, _berlin(2026, 3, 30, 12)) == [
        "dst-20260329T010000Z",  # 03:00 CEST
        "dst-20260330T003000Z",  # 02:30 CEST
    ]


@pytest.mark.backends("memory", "sqlite")  # pure time arithmetic: the store plays no part
def test_a_daily_fire_in_the_repeated_hour_runs_once(storage_factory: Opener) -> None:
    clock = VirtualClock(_berlin(2026, 10, 24, 12))
    engine = _engine(storage_factory, clock)
    engine.schedule("dst", "report", cron="30 2 * * *", timezone="Europe/Berlin")
    # 25 October: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice and fires once.
    assert _fires(engine, clock, _berlin(2026, 10, 26, 12)) == [
        "dst-20261025T003000Z",  # 02:30 CEST, the first occurrence
        "dst-20261026T013000Z",  # 02:30 CET
    ]


@pytest.mark.backends("memory", "sqlite")  # pure time arithmetic: the store plays no part
def test_a_sub_hourly_schedule_fires_in_both_occurrences_of_the_repeated_hour(
    storage_factory: Opener,
) -> None:
    clock = VirtualClock(_berlin(2026, 10, 25, 1, 45))
    engine = _engine(storage_factory, clock)
    engine.schedule("half", "report", cron="*/30 2 * * *", timezone="Europe/Berlin")
    assert _fires(engine, clock, _berlin(2026, 10, 25, 4)) == [
        "half-20261025T000000Z",  # 02:00 CEST
        "half-20261025T003000Z",  # 02:30 CEST
        "half-20261025T010000Z",  # 02:00 CET
        "half-20261025T013000Z",  # 02:30 CET: distinct UTC instants, distinct run ids
    ]


@pytest.mark.backends("memory", "sqlite")  # pure time arithmetic: the store plays no part
@pytest.mark.parametrize(
    ("timing", "missed"), [({"every": "1m"}, 143_999), ({"cron": "* * * * *"}, MAX_FIRES_COUNTED)]
)
def test_a_long_outage_starts_the_latest_fire_and_counts_what_it_can(
    storage_factory: Opener, clock: VirtualClock, timing: dict[str, str], missed: int
) -> None:
    """100 days of minutely fires: the pass starts the latest one at once (cron counts up to
    MAX_FIRES_COUNTED missed fires: stepping cron costs time a pass does not have)."""
    engine = _engine(storage_factory, clock)
    h = engine.schedule("long-outage", "report", **timing)  # type: ignore[arg-type]
    _tick(engine, clock, 100 * 86400 + 30)
    assert [s.id for s in engine.list()] == [_rid("long-outage", T0 + 100 * 86400)]
    d = h.describe()
    assert (d.fired, d.missed, d.next_fire_at) == (1, missed, T0 + 100 * 86400 + MIN)


def test_under_lease_a_deposed_engine_s_fire_batch_is_refused(
    storage_factory: Opener, clock: VirtualClock
) -> None:
    """The fire batch carries the store lease's condition: an engine whose lease was taken
    between its read and its write starts nothing (the schedule's record and the run's id
    are as it read them: only the lease refuses the batch); the new holder fires once."""
    engines: list[Engine] = []

    def take_over() -> None:
        clock.advance(31)  # past the old holder's lease: another engine takes the store
        engines.append(_engine(storage_factory, clock, ownership="lease", engine_id="new"))

    racing = _FireHook(storage_factory(), "before", take_over)
    old = Engine.create(
        racing,
        WORKFLOWS,
        background_tasks="manual",
        clock=clock,
        ownership="lease",
        engine_id="old",
        lease_ttl=30,
    )
    h = old.schedule("fenced", "report", every="1m")
    clock.advance(MIN)
    with pytest.warns(RuntimeWarning, match="lost the store-wide lease"):
        old.run_maintenance(clock())
    new = engines[0]
    assert new.list() == []
    assert new.get_schedule("fenced").describe().fired == 0
    new.run_maintenance(clock())
    assert [s.id for s in new.list()] == [_rid("fenced", T0 + MIN)]
    assert new.describe(_rid("fenced", T0 + MIN)).status == "completed"
    assert new.get_schedule("fenced").describe().fired == 1
    assert h.describe().fired == 1  # read through the old engine's handle: one fire
