"""``bench/capacity_model.py`` turns a measurement into daily figures as its docstrings say.

A small synthetic measurement with round numbers, so every expected value can be worked out
by hand from the formula it checks.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("capacity_model", BENCH / "capacity_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


m = _load()

LOAD = m.Load(runs_per_day=864_000, steps=10, sleeps=2, signals=1, result_bytes=1000)  # 10/s
DEPLOY = m.Deployment(
    maintenance_rate_seconds=60.0,
    maintenance_timeout_seconds=50.0,
    maintenance_memory_mb=256,
    api_memory_mb=512,
    max_timers_per_pass=1000,
    shards=8,
)
MEASURED = m.Measured(
    run=m.Units(requests=20, write_units=40, read_units=10),
    partition_writes={"wf": 30, "timers": 8, "status#running": 4, "meta": 1},
    measured_shards={"timers": 4, "status#running": 4, "claims": 4},
    idle_pass=m.Units(requests=10, write_units=0, read_units=10),
    idle_shard_requests={"timers": 4, "claims": 4},
    timer_fire=m.Units(requests=5, write_units=6, read_units=4),
    start_seconds=0.1,
    signal_seconds=0.05,
    idle_pass_seconds=0.02,
    fire_seconds_per_timer=0.04,
    idle_partition_writes={"meta": 1.0},
)


def test_construct_defaults_reads_keyword_defaults_and_duration_fallbacks() -> None:
    source = (
        "class C:\n"
        "    def __init__(self, scope, *, rate_in=None, memory_mb: int = 256, api: str = 'rest',\n"
        "                 throttle: float = 100.0, flag: bool = True) -> None:\n"
        "        rate = rate_in or Duration.minutes(2)\n"
        "        timeout = None or Duration.seconds(55)\n"
    )
    found, strings = m.construct_defaults(source)
    assert found == {"memory_mb": 256.0, "throttle": 100.0, "rate": 120.0, "timeout": 55.0}
    assert strings == {"api": "rest"}


def test_the_real_construct_still_has_every_default_the_script_reads() -> None:
    source = (BENCH.parent / "infra" / "weft_serverless_infra" / "construct.py").read_text()
    found, strings = m.construct_defaults(source)
    assert all(found[name] > 0 for name in m.DEPLOYMENT_SETTINGS)
    assert strings["api"] in m.API_GATEWAY_USD


def test_partition_class_strips_shards_and_run_ids() -> None:
    assert m.partition_class("timers#03") == "timers"
    assert m.partition_class("status#running#01") == "status#running"
    assert m.partition_class("wf#order%2D7") == "wf"
    assert m.partition_class("meta") == "meta"
    assert m.is_sharded("timers#03") and not m.is_sharded("meta")
    assert not m.is_sharded("wf#12")


def test_idle_pass_scales_only_its_shard_reads() -> None:
    # 8 requests read 4 shards of two classes; at 8 shards they are 16: 8 more, 1 RRU each.
    idle = m.idle_pass_at(MEASURED, 8)
    assert (idle.requests, idle.write_units, idle.read_units) == (18, 0, 18)
    assert m.idle_pass_at(MEASURED, 4) == MEASURED.idle_pass


def test_dynamodb_per_day_is_runs_times_a_run_plus_passes_times_an_idle_pass() -> None:
    day = m.dynamodb_per_day(MEASURED, LOAD, DEPLOY)
    assert day.runs == m.Units(20 * 864_000, 40 * 864_000, 10 * 864_000)
    assert day.maintenance == m.Units(18 * 1440, 0, 18 * 1440)
    assert m.table_rates(day) == pytest.approx(
        (40 * 864_000 / 86_400, (10 * 864_000 + 18 * 1440) / 86_400)
    )
    assert day.total.dollars() == pytest.approx(
        40 * 864_000 * 0.625e-6 + (10 * 864_000 + 18 * 1440) * 0.125e-6
    )


def test_lambda_per_day_counts_a_start_and_each_signal_and_one_invocation_a_tick() -> None:
    lam = m.lambda_per_day(MEASURED, LOAD, DEPLOY)
    assert lam.api_invocations == 864_000 * 2
    assert lam.api_gb_seconds == pytest.approx(864_000 * (0.1 + 0.05) * 0.5)
    assert lam.maintenance_invocations == 1440
    # Idle part of every pass, plus each of the day's 1,728,000 timers at 40 ms, at 0.25 GB.
    assert lam.maintenance_gb_seconds == pytest.approx((1440 * 0.02 + 1_728_000 * 0.04) * 0.25)
    assert lam.api_requests_per_second == pytest.approx(20.0)
    assert lam.api_concurrency == pytest.approx(10 * 0.15)
    assert lam.dollars() == pytest.approx(lam.invocations * 0.2e-6 + lam.gb_seconds * 0.0000133334)


def test_api_gateway_charges_each_api_invocation_at_the_stage_types_price() -> None:
    lam = m.lambda_per_day(MEASURED, LOAD, DEPLOY)
    assert m.api_gateway_dollars_per_day(lam, DEPLOY) == pytest.approx(864_000 * 2 * 3.5e-6)
    http = m.Deployment(api="http")
    assert m.api_gateway_dollars_per_day(lam, http) == pytest.approx(864_000 * 2 * 1e-6)


def test_scheduler_is_free_under_fourteen_million_a_month() -> None:
    assert m.scheduler_dollars_per_day(1440) == 0.0
    # 1M a day is 30.4375M a month: 16.4375M billable at $1/M, spread over the month's days.
    assert m.scheduler_dollars_per_day(1e6) == pytest.approx(16.4375 / 30.4375)


def test_partition_rates_spread_sharded_writes_over_the_deployed_shards() -> None:
    rates = {rate.name: rate for rate in m.partition_rates(MEASURED, LOAD, DEPLOY)}
    assert rates["timers"].write_units_per_second == pytest.approx(8 * 10 / 8)
    assert rates["status#running"].write_units_per_second == pytest.approx(4 * 10 / 8)
    assert rates["meta"].shards == 1
    # 1 unit a run at 10 runs/s, plus the idle pass's 1 unit once a minute.
    assert rates["meta"].write_units_per_second == pytest.approx(10.0 + 1 / 60)
    assert rates["timers"].share_of_limit == pytest.approx(10 / 1000)
    ordered = [rate.name for rate in m.partition_rates(MEASURED, LOAD, DEPLOY)]
    assert ordered[:2] == ["meta", "timers"]  # 10.02 before 10.0
    assert m.shards_needed(8, m.Load(runs_per_day=86_400 * 1000)) == 16  # 8,000 WCU/s at 500


def test_maintenance_lag_keeps_up_below_capacity_and_falls_behind_above() -> None:
    lag = m.maintenance_lag(MEASURED, LOAD, DEPLOY)
    # 20 timers due a second; one worker fires 25/s for 50 s of each 60 s: 20.8/s. A pass
    # that fired its cap is followed at once by another, so the cap (16.7/s) does not bind.
    assert lag.due_per_second == pytest.approx(20.0)
    assert lag.fire_per_second == pytest.approx(25.0)
    assert lag.capacity_per_second == pytest.approx(25 * 50 / 60)
    assert lag.keeps_up
    heavy = m.maintenance_lag(MEASURED, m.Load(runs_per_day=864_000, sleeps=3), DEPLOY)
    assert not heavy.keeps_up
    assert heavy.backlog_per_hour == pytest.approx((30 - 25 * 50 / 60) * 3600)
    assert heavy.lateness_seconds == pytest.approx(heavy.backlog_per_hour / (25 * 50 / 60))
    light = m.maintenance_lag(MEASURED, m.Load(runs_per_day=86_400, sleeps=1), DEPLOY)
    # 1 due a second: 60 due a tick, fired in 2.4 s after a wait of at most one tick.
    assert light.keeps_up and light.backlog_per_hour == 0
    assert light.lateness_seconds == pytest.approx(60 + 60 * 0.04)


def test_workers_multiply_firing_each_at_its_parallel_rate_bound_by_its_cpu() -> None:
    parallel = replace(MEASURED, worker_fire_rate=200.0, fire_cpu_seconds=0.004)
    eight = replace(DEPLOY, maintenance_workers=8)
    # 256 MB is 0.145 vCPU: 36/s of 4 ms fires, below the 200/s the round trips allow.
    assert m.worker_fire_rate(parallel, eight) == pytest.approx(256 / 1769 / 0.004)
    lag = m.maintenance_lag(parallel, LOAD, eight)
    assert lag.capacity_per_second == pytest.approx(8 * 256 / 1769 / 0.004 * 50 / 60)
    big = replace(eight, maintenance_memory_mb=3538)  # 2 vCPU: the round trips bind
    assert m.worker_fire_rate(parallel, big) == pytest.approx(200.0)
    assert m.maintenance_lag(parallel, LOAD, big).capacity_per_second == pytest.approx(
        8 * 200 * 50 / 60
    )
    assert m.worker_fire_rate(MEASURED, big) == pytest.approx(25.0)  # not measured: serial


def test_a_run_written_for_fewer_units_moves_the_write_limits_in_proportion() -> None:
    half = m.at_run_write_units(MEASURED, 20.0)
    assert half.run.write_units == 20.0 and half.run.requests == MEASURED.run.requests
    assert half.partition_writes == {"wf": 15, "timers": 4, "status#running": 2, "meta": 0.5}
    before = dict((name, runs) for name, runs, _ in m.limits(MEASURED, LOAD, DEPLOY))
    after = dict((name, runs) for name, runs, _ in m.limits(half, LOAD, DEPLOY))
    quota = "table write quota (on-demand default)"
    assert after[quota] == pytest.approx(2 * before[quota])


def test_construct_constants_are_read_from_its_source() -> None:
    source = "X = 1\nSHARDS = {'timers': 16, 'claims': 16}\n"
    assert m.construct_constant(source, "SHARDS") == {"timers": 16, "claims": 16}
    with pytest.raises(KeyError):
        m.construct_constant(source, "MISSING")


def test_peers_count_steps_waits_and_signals() -> None:
    peers = m.peers_per_day(LOAD)
    assert peers.durable_operations == 13 * 864_000
    assert peers.durable_gb_written == pytest.approx(10 * 1000 * 864_000 / 1e9)
    assert peers.durable_dollars() == pytest.approx(13 * 0.864 * 8 + 8.64 * 0.25)
    assert peers.step_functions_dollars() == pytest.approx(13 * 0.864 * 25)
    assert m.per_million_runs(86.4, LOAD) == pytest.approx(100.0)


def test_a_tick_runs_more_passes_but_not_faster_than_the_fire_rate() -> None:
    ticking = m.Deployment(maintenance_timeout_seconds=50.0, tick_seconds=10.0)
    lag = m.maintenance_lag(MEASURED, LOAD, ticking)
    # Cap 1,000 per 10 s pass is 100/s; 25/s for 50 s of each 60 s is 20.8/s: that binds.
    assert lag.cap_per_second == pytest.approx(100.0)
    assert lag.capacity_per_second == pytest.approx(25 * 50 / 60)
    assert lag.keeps_up  # 20 due a second against 20.8
    # 200 fall due each 10 s tick and take 8 s to fire at 25/s.
    assert lag.lateness_seconds == pytest.approx(10 + 200 / 25)


def test_limits_are_the_loads_at_which_each_figure_meets_its_limit() -> None:
    found = {name: runs for name, runs, _ in m.limits(MEASURED, LOAD, DEPLOY)}
    # 25 timers a second for 50 s of each 60 s, 2 sleeps a run: 10.4 runs/s.
    assert found["maintenance fires timers as fast as they fall due"] == pytest.approx(
        25 * 50 / 60 / 2 * 86_400
    )
    assert found["API stage throttle"] == pytest.approx(100 / 2 * 86_400)  # 2 calls a run
    # A run holds an API function 0.1 s (start) + 0.05 s (a signal): 1,000 at 6,667 runs/s.
    assert found["Lambda concurrent executions (account default)"] == pytest.approx(
        (1000 - 1) / 0.15 * 86_400  # less the one maintenance worker's reservation
    )
    # timers: 8 units a run over 8 shards, 1,000 WCU/s each.
    assert found["partition write limit on timers (8 shards)"] == pytest.approx(1000 * 86_400)
    assert found["table write quota (on-demand default)"] == pytest.approx(40_000 / 40 * 86_400)
    ordered = [runs for _, runs, _ in m.limits(MEASURED, LOAD, DEPLOY)]
    assert ordered == sorted(ordered)


def test_each_partition_class_belongs_to_the_index_whose_count_it_takes() -> None:
    assert [m.index_of(name) for name in ("timers", "status#running", "claims", "outbox")] == [
        "timers",
        "status",
        "claims",
        "outbox",
    ]
    assert m.index_of("sa#customer") == m.index_of("tag") == "visibility"
    assert m.index_of("meta") is None and m.index_of("wf") is None
    per_index = m.Deployment(shards={"timers": 16})
    assert (per_index.shards_of("timers"), per_index.shards_of("status#failed")) == (16, 4)
    assert per_index.shards_of("meta") == 1


def test_counts_per_index_scale_only_their_own_reads_and_writes() -> None:
    # The idle pass reads 4 timer shards and 4 claim shards; 16 timer shards add 12 reads.
    idle = m.idle_pass_at(MEASURED, {"timers": 16})
    assert (idle.requests, idle.read_units) == (22, 22)
    deploy = m.Deployment(shards={"timers": 16})
    rates = {rate.name: rate for rate in m.partition_rates(MEASURED, LOAD, deploy)}
    assert rates["timers"].shards == 16
    assert rates["timers"].write_units_per_second == pytest.approx(8 * 10 / 16)
    assert rates["status#running"].shards == 4
    assert rates["status#running"].write_units_per_second == pytest.approx(4 * 10 / 4)


def test_index_headroom_is_the_limit_over_one_shards_rate_least_first() -> None:
    rows = m.index_headroom(MEASURED, LOAD, m.Deployment(shards={"timers": 16}))
    assert [(r.index, r.shards, r.hottest) for r in rows] == [
        ("status", 4, "status#running"),
        ("timers", 16, "timers"),
        ("claims", 4, "-"),  # measured as sharded, never written by this workload
        ("visibility", 4, "-"),
        ("outbox", 4, "-"),
    ]
    assert rows[2].headroom == float("inf")
    assert rows[0].headroom == pytest.approx(1000 / 10)  # 4 units x 10 runs/s over 4 shards
    assert rows[1].headroom == pytest.approx(1000 / 5)  # 8 units x 10 runs/s over 16 shards
    assert rows[1].share_of_limit == pytest.approx(5 / 1000)
    found = {name: hint for name, _, hint in m.limits(MEASURED, LOAD, DEPLOY)}
    assert (
        "the timers shard count, chosen when the store is created"
        in (found["partition write limit on timers (8 shards)"])
    )
