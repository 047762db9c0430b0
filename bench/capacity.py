"""Capacity model: what a given number of runs a day costs and where it first runs short.

Measures, on in-process moto DynamoDB through the adapter's request meter, one whole run of
the described workload (a start in an API invocation, S steps returning R bytes, sleeps
fired by maintenance passes, signals delivered in API invocations, completion), an idle
maintenance pass, and one pass firing many due timers; counts the write units each partition
takes (wrapping the adapter's write path); measures one maintenance worker's fire rate with
its parallel fires on a per-request latency model (``firing_workers.measure_per_worker``);
reads the CDK construct's defaults from infra/. The limits are printed for the construct's
defaults and for the knobs that carry 100M runs a day, each at the measured write units of
a run and at issue 28's target of 45.
Then scales those measured figures to the requested load (bench/capacity_model.py holds the
arithmetic) and prints DynamoDB units, Lambda invocations and GB-seconds, EventBridge
invocations, the hottest partitions against the 1,000 WCU/s limit, maintenance lag and
dollars, beside Lambda durable functions and Step Functions Standard.
Run: ``python bench/capacity.py --runs-per-day 1000000`` (about 20 s, most of it parking the
runs whose timers one pass fires); several loads from one measurement: ``--runs-per-day
1e6,1e7,1e8``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

import capacity_model as model
import firing_workers

from weft_serverless import Engine, workflow
from weft_serverless.aws.maintenance import DEFAULT_PARALLEL_FIRES
from weft_serverless.engine.runtime import MAX_TIMERS_PER_PASS
from weft_serverless.errors import ClockSkewDetected, ConfigurationError
from weft_serverless.storage import keys
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.storage.dynamodb_meter import TRANSACTION_MULTIPLIER
from weft_serverless.storage.shard_layout import check_shards
from weft_serverless.testing import VirtualClock, moto_dynamodb

ROOT = Path(__file__).resolve().parent.parent
SLEEP = 3600.0


def result(size: int) -> str:
    return "x" * size


def workload(ctx, spec):  # type: ignore[no-untyped-def]
    """S steps split evenly around the waits; sleeps and signals alternate, sleeps first."""
    waits, counts = spec["waits"], spec["counts"]
    for segment, count in enumerate(counts):
        for _ in range(count):
            yield ctx.run("result", spec["bytes"])
        if segment < len(waits):
            if waits[segment] == "sleep":
                yield ctx.sleep(SLEEP)
            else:
                yield ctx.wait_for_signal("go")
    return "done"


def nap(ctx, spec):  # type: ignore[no-untyped-def]
    """Parks on a sleep, then does what the workload does after one of its timers fires."""
    yield ctx.sleep(SLEEP)
    for _ in range(spec["steps"]):
        yield ctx.run("result", spec["bytes"])
    return "done"


WORKFLOWS = {
    "workload": workflow("workload").activities(result=result).execute(workload),
    "nap": workflow("nap").activities(result=result).execute(nap),
}


def plan(load: model.Load) -> dict[str, Any]:
    """The workload's input: the waits in order and the steps before and after each."""
    waits: list[str] = []
    sleeps, signals = load.sleeps, load.signals
    while sleeps or signals:
        if sleeps:
            waits.append("sleep")
            sleeps -= 1
        if signals:
            waits.append("signal")
            signals -= 1
    segments = len(waits) + 1
    counts = [
        load.steps // segments + (1 if i < load.steps % segments else 0) for i in range(segments)
    ]
    return {"waits": waits, "counts": counts, "bytes": load.result_bytes}


class PartitionMeter:
    """Write units per partition and shard reads, counted where the adapter bills them.

    Wraps the adapter's write path (each action's units, doubled in a transaction, as the
    meter bills them; a batch delete 1 unit a key) and its range reads (one per call). A
    refused conditional write is billed by the meter from the item it returns; the report
    compares the two totals, so a difference shows.
    """

    def __init__(self, storage: DynamoDBStorage) -> None:
        self.writes: Counter[str] = Counter()
        self.scans: Counter[str] = Counter()
        writes = storage._writes
        write_one, transact, delete_chunk = writes._write_one, writes._transact, writes.delete_chunk
        scan = storage._scan

        def counted_one(action: Any) -> None:
            self.writes[action.key.partition] += action.units()
            write_one(action)

        def counted_transact(actions: list[Any]) -> None:
            for action in actions:  # a condition check is billed as a write too
                self.writes[action.key.partition] += action.units() * TRANSACTION_MULTIPLIER
            transact(actions)

        def counted_delete(chunk: Any) -> None:
            for key in chunk:
                self.writes[key.partition] += 1
            delete_chunk(chunk)

        def counted_scan(partition: str, *args: Any) -> Iterator[tuple[str, bytes]]:
            self.scans[partition] += 1
            return scan(partition, *args)

        writes._write_one = counted_one  # type: ignore[method-assign]
        writes._transact = counted_transact  # type: ignore[method-assign]
        writes.delete_chunk = counted_delete  # type: ignore[method-assign]
        storage._scan = counted_scan  # type: ignore[method-assign]

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        return Counter(self.writes), Counter(self.scans)


@dataclass
class Phase:
    """What one measured call cost: units, partition writes, shard reads, wall seconds."""

    units: model.Units
    writes: Counter[str]
    scans: Counter[str]
    seconds: float
    fired: int = 0


@contextmanager
def metered(storage: DynamoDBStorage, parts: PartitionMeter, out: list[Phase]) -> Iterator[None]:
    before, (writes, scans) = storage.meter.snapshot(), parts.snapshot()
    began = time.perf_counter()
    yield
    seconds = time.perf_counter() - began
    used = storage.meter.snapshot() - before
    after_writes, after_scans = parts.snapshot()
    units = model.Units(used.requests, used.write_units, used.read_units)
    out.append(Phase(units, after_writes - writes, after_scans - scans, seconds))


def engine_for(storage: DynamoDBStorage, ownership: str, clock: VirtualClock) -> Engine:
    return Engine.create(
        storage,
        WORKFLOWS,
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=clock,
        recover=False,
    )


def engines(storage: DynamoDBStorage, ownership: str, clock: VirtualClock) -> tuple[Engine, Engine]:
    """An API and a maintenance engine; one engine for both under ``lease``, whose store-wide
    lease admits a single engine at a time."""
    api = engine_for(storage, ownership, clock)
    if ownership == "lease":
        return api, api
    return api, engine_for(storage, ownership, clock)


def classes(counter: Counter[str]) -> Counter[str]:
    grouped: Counter[str] = Counter()
    for partition, units in counter.items():
        grouped[model.partition_class(partition)] += units
    return grouped


@dataclass
class RunMeasurement:
    run: model.Units
    writes: Counter[str]
    idle: Phase
    fire: model.Units
    start_seconds: float
    signal_seconds: float
    meter_check: tuple[float, float]


def measure_run(storage: DynamoDBStorage, ownership: str, load: model.Load) -> RunMeasurement:
    """One whole run of the workload, phase by phase, as the deployment runs it.

    Two engines share the table as the API and maintenance functions do, each call inside
    an invocation scope (claims released at its end, as the handlers do). Before each wait
    is ended, an idle pass is measured; the pass that fires the timer counts for the run
    only above that idle pass, and so does a last pass after the run ended (its clean-up).
    """
    clock = VirtualClock()
    parts = PartitionMeter(storage)
    api, maintenance = engines(storage, ownership, clock)
    spec = plan(load)
    run: list[Phase] = []
    idles: list[Phase] = []
    passes: list[Phase] = []
    paired: list[Phase] = []  # the idle pass measured just before each of ``passes``
    signals: list[Phase] = []

    def idle_pass() -> None:
        clock.advance(60.0)
        with metered(storage, parts, idles), maintenance.invocation():
            report = maintenance.run_maintenance()
        assert report.timers_fired == 0 and report.workflows_driven == 0, report

    with metered(storage, parts, run), api.invocation():
        api.start("workload", spec, id="run-0")
    for wait in spec["waits"]:
        idle_pass()
        if wait == "sleep":
            clock.advance(SLEEP)
            paired.append(idles[-1])
            with metered(storage, parts, passes), maintenance.invocation():
                report = maintenance.run_maintenance()
            assert report.timers_fired >= 1, report
        else:
            with metered(storage, parts, signals), api.invocation():
                api.signal("run-0", "go", None)
    idle_pass()
    clock.advance(SLEEP)
    paired.append(idles[-1])
    with metered(storage, parts, passes), maintenance.invocation():
        maintenance.run_maintenance()  # anything the run left behind falls due by now
    status = api.describe("run-0").status
    assert status == "completed", status
    api.close()
    maintenance.close()
    idle = idles[0]
    total_units = run[0].units
    writes = Counter(run[0].writes)
    fire_units = model.Units()
    for phase, before in zip(passes, paired, strict=True):
        # A pass doing the run's work, less what the idle pass just before it cost.
        extra = phase.units - before.units
        fire_units = extra if fire_units == model.Units() else fire_units
        total_units += extra
        writes.update(phase.writes)
        writes.subtract(before.writes)
    for phase in signals:
        total_units += phase.units
        writes.update(phase.writes)
    counted = sum(sum(p.writes.values()) for p in run + passes + signals)
    metered_wru = sum(p.units.write_units for p in run + passes + signals)
    signal_seconds = sum(p.seconds for p in signals) / len(signals) if signals else 0.0
    return RunMeasurement(
        total_units,
        +writes,
        idle,
        fire_units if load.sleeps else model.Units(),
        run[0].seconds,
        signal_seconds,
        (counted, metered_wru),
    )


def measure_firing(
    storage: DynamoDBStorage, ownership: str, load: model.Load, timers: int
) -> tuple[Phase, Phase]:
    """An idle pass, then one pass in which ``timers`` parked runs' timers all fall due."""
    clock = VirtualClock()
    parts = PartitionMeter(storage)
    api, maintenance = engines(storage, ownership, clock)
    after_sleep = plan(load)["counts"][1] if load.sleeps else 0
    spec = {"steps": after_sleep, "bytes": load.result_bytes}
    with api.invocation():
        for index in range(timers):
            api.start("nap", spec, id=f"nap-{index}")
    clock.advance(60.0)
    out: list[Phase] = []
    with metered(storage, parts, out), maintenance.invocation():
        maintenance.run_maintenance()
    clock.advance(SLEEP)
    with metered(storage, parts, out), maintenance.invocation():
        report = maintenance.run_maintenance(max_timers=max(timers, MAX_TIMERS_PER_PASS))
    out[1].fired = report.timers_fired
    api.close()
    maintenance.close()
    return out[0], out[1]


def deployment(shards: int | dict[str, int] | None, tick: float) -> model.Deployment:
    from weft_serverless.aws.maintenance import DEFAULT_MARGIN

    source = (ROOT / "infra" / "weft_serverless_infra" / "construct.py").read_text()
    found, strings = model.construct_defaults(source)
    new_table = model.construct_constant(source, "DEFAULT_NEW_TABLE_SHARDS")
    assert isinstance(new_table, dict)
    return model.Deployment(
        maintenance_rate_seconds=found["rate"],
        maintenance_timeout_seconds=found["maintenance_timeout"] - DEFAULT_MARGIN,
        maintenance_memory_mb=int(found["maintenance_memory_mb"]),
        api_memory_mb=int(found["api_memory_mb"]),
        api_throttle_rate=found["api_throttle_rate"],
        api=strings["api"],
        max_timers_per_pass=MAX_TIMERS_PER_PASS,
        shards=new_table if shards is None else shards,
        tick_seconds=tick,
        maintenance_workers=int(found["maintenance_workers"]),
    )


RUN_WRITE_UNITS_TARGET = 45.0
"""Issue 28's target for the default run's write units; the limits are printed at the
measured figure and at this one."""
AT_100M = {
    "maintenance_workers": 48,
    "maintenance_memory_mb": 1024,
    "shards": {"timers": 64, "claims": 32, "status": 16},
}
"""Knobs for 100M runs a day, no code change: 48 workers of 1 GB, 64 timer shards, 32 claim
and 16 status shards on a new table; plus a table write quota increase (printed below)."""


MEASURED_SHARDS = {
    "timers": keys.TIMER_SHARDS,
    "claims": keys.CLAIM_SHARDS,
    "tag": keys.VISIBILITY_SHARDS,
    "outbox": keys.OUTBOX_SHARDS,
}


def shard_counts(names: set[str]) -> dict[str, int]:
    """Shard count of each sharded class as the engine has it (status/sa/... by prefix)."""
    counts: dict[str, int] = {}
    for name in names:
        head = name.split("#", 1)[0]
        counts[name] = {
            "status": keys.STATUS_SHARDS,
            "sa": keys.VISIBILITY_SHARDS,
        }.get(head, MEASURED_SHARDS.get(head, 1))
    return counts


def measure(
    ownership: str, load: model.Load, timers: int, repeat: int
) -> tuple[model.Measured, dict[str, Any]]:
    """The run ``repeat`` times on fresh tables: its units must agree; its times are noisy on
    a shared machine, so the median of each is kept."""
    with moto_dynamodb() as moto:
        runs = [
            measure_run(moto.storage(f"weft-capacity-run-{n}"), ownership, load)
            for n in range(repeat)
        ]
        idle, many = measure_firing(moto.storage("weft-capacity-fire"), ownership, load, timers)
    one = runs[0]
    assert all(r.run == one.run and r.writes == one.writes for r in runs), "units differ"
    one.start_seconds = statistics.median(r.start_seconds for r in runs)
    one.signal_seconds = statistics.median(r.signal_seconds for r in runs)
    one.idle.seconds = statistics.median(r.idle.seconds for r in runs)
    sharded = {
        model.partition_class(p)
        for p in list(one.writes) + list(one.idle.scans)
        if model.is_sharded(p)
    }
    shard_reads = classes(Counter({p: n for p, n in one.idle.scans.items() if model.is_sharded(p)}))
    per_timer = max(0.0, many.seconds - idle.seconds) / max(1, many.fired)
    worker = firing_workers.measure_per_worker()
    measured = model.Measured(
        run=one.run,
        partition_writes=dict(classes(one.writes)),
        measured_shards=shard_counts(sharded),
        idle_pass=one.idle.units,
        idle_shard_requests=dict(shard_reads),
        timer_fire=one.fire,
        start_seconds=one.start_seconds,
        signal_seconds=one.signal_seconds,
        idle_pass_seconds=one.idle.seconds,
        fire_seconds_per_timer=per_timer,
        idle_partition_writes=dict(classes(one.idle.writes)),
        worker_fire_rate=worker.per_second,
        fire_cpu_seconds=worker.cpu_seconds / worker.runs,
    )
    extra = {
        "fired": many.fired,
        "fire_pass_seconds": many.seconds,
        "fire_pass_units": many.units,
        "meter_check": one.meter_check,
    }
    return measured, extra


def count(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.2f}{unit}"
    return f"{value:,.2f}"


def units_row(label: str, units: model.Units, tail: str = "") -> str:
    cells = f"{count(units.requests):>9} req {count(units.write_units):>9} WRU"
    return f"  {label:<21}{cells} {count(units.read_units):>9} RRU  {tail}".rstrip()


def report_measured(
    measured: model.Measured,
    extra: dict[str, Any],
    load: model.Load,
    deploy: model.Deployment,
    ownership: str,
) -> None:
    print(
        f"workload: each run {load.steps} steps of {load.result_bytes} B, {load.sleeps} "
        f"sleeps, {load.signals} signals; ownership {ownership}; shards {deploy.shards}"
    )
    print(
        f"construct: maintenance every {deploy.maintenance_rate_seconds:.0f} s "
        f"({deploy.maintenance_memory_mb} MB, "
        f"pass budget {deploy.maintenance_timeout_seconds:.0f} s, "
        f"cap {deploy.max_timers_per_pass} timers/pass, tick {deploy.tick_seconds:g} s), "
        f"{deploy.api} API, {deploy.api_memory_mb} MB, "
        f"API throttle {deploy.api_throttle_rate:.0f} req/s"
    )
    run, fire = measured.run, measured.timer_fire
    print("\nmeasured on moto (per operation)")
    print(units_row("one whole run", run, f"(${run.dollars() * 1e6:,.2f} per M runs)"))
    idle_ms = measured.idle_pass_seconds * 1000
    print(units_row("idle pass", measured.idle_pass, f"{idle_ms:.1f} ms"))
    print(units_row("firing one timer", fire, "(a pass minus an idle pass)"))
    start_ms, signal_ms = measured.start_seconds * 1000, measured.signal_seconds * 1000
    print(f"  API start / signal   {start_ms:.1f} ms / {signal_ms:.1f} ms wall (median)")
    per_timer_ms = measured.fire_seconds_per_timer * 1000
    print(
        f"  one pass firing {extra['fired']} timers: {extra['fire_pass_seconds']:.2f} s wall, "
        f"{per_timer_ms:.1f} ms per timer, {extra['fire_pass_units'].requests:.0f} req"
    )
    ranked = sorted(measured.partition_writes.items(), key=lambda item: -item[1])
    print("  WRU per run by partition: " + ", ".join(f"{n} {u:g}" for n, u in ranked))
    counted, metered_wru = extra["meter_check"]
    print(f"  partition meter check: {counted:.0f} WRU counted = {metered_wru:.0f} WRU metered")


def report_limits(measured: model.Measured, load: model.Load, deploy: model.Deployment) -> None:
    rate = model.worker_fire_rate(measured, deploy)
    print(
        f"\none maintenance worker fires {measured.worker_fire_rate:,.1f} timers/s with "
        f"{DEFAULT_PARALLEL_FIRES} parallel fires ({firing_workers.LATENCY_MS:g} ms a request, "
        f"bench/firing_workers.py), {measured.fire_cpu_seconds * 1000:.2f} ms CPU a fire: "
        f"{rate:,.1f}/s at {deploy.maintenance_memory_mb} MB"
    )
    configs = [("the construct's defaults", deploy)]
    configs.append(("the knobs for 100M (no code change)", replace(deploy, **AT_100M)))
    for title, config in configs:
        lag = model.maintenance_lag(measured, load, config)
        print(
            f"\n{title}: {config.maintenance_workers} workers, "
            f"{config.maintenance_memory_mb} MB, shards {config.shards}; timers sustained "
            f"{lag.capacity_per_second * 60:,.0f} a minute"
        )
        for wru in dict.fromkeys((measured.run.write_units, RUN_WRITE_UNITS_TARGET)):
            at = model.at_run_write_units(measured, wru)
            print(f"  what breaks first at {wru:g} WRU a run (runs a day at the mean rate)")
            for name, runs, knob in model.limits(at, load, config):
                print(f"    {count(runs):>9}  {name}  [knob: {knob}]")


def report_load(measured: model.Measured, load: model.Load, deploy: model.Deployment) -> None:
    print(f"\n=== {count(load.runs_per_day)} runs a day ({load.runs_per_second:,.1f} a second)")
    day = model.dynamodb_per_day(measured, load, deploy)
    lam = model.lambda_per_day(measured, load, deploy)
    ddb_usd = day.total.dollars()
    lam_usd = lam.dollars()
    sched_usd = model.scheduler_dollars_per_day(deploy.passes_per_day)
    gateway_usd = model.api_gateway_dollars_per_day(lam, deploy)
    total = ddb_usd + lam_usd + sched_usd + gateway_usd
    print("per day")
    print(units_row("DynamoDB runs", day.runs))
    passes = f"({deploy.passes_per_day:.0f} passes)"
    print(units_row("DynamoDB idle passes", day.maintenance, passes))
    print(units_row("DynamoDB total", day.total, f"${ddb_usd:,.2f}"))
    wcu, rcu = model.table_rates(day)
    print(
        f"  DynamoDB table       {wcu:>9,.0f} WRU/s {rcu:>9,.0f} RRU/s mean, against the "
        f"default on-demand table quota of {model.TABLE_UNIT_QUOTA:,} each"
    )
    print(
        f"  Lambda API           {count(lam.api_invocations):>9} inv "
        f"{lam.api_gb_seconds:>12,.0f} GB-s  ({lam.api_requests_per_second:,.1f} req/s, "
        f"{lam.api_concurrency:,.2f} concurrent, means over the day)"
    )
    print(
        f"  Lambda maintenance   {count(lam.maintenance_invocations):>9} inv "
        f"{lam.maintenance_gb_seconds:>12,.0f} GB-s"
    )
    print(
        f"  Lambda total         {count(lam.invocations):>9} inv {lam.gb_seconds:>12,.0f} GB-s"
        f"  ${lam_usd:,.2f}  (local wall time stands in for Lambda duration)"
    )
    print(
        f"  EventBridge          {count(deploy.passes_per_day):>9} inv  ${sched_usd:,.2f}"
        "  (14M a month free)"
    )
    if lam.api_requests_per_second > deploy.api_throttle_rate:
        print(
            f"  ! the API's mean {lam.api_requests_per_second:,.0f} req/s is over the stage "
            f"throttle of {deploy.api_throttle_rate:.0f} req/s (api_throttle_rate)"
        )

    print("\nshard headroom per index (one shard's write units/s against 1,000 WCU)")
    print(
        f"  {'index':<12}{'shards':>7}{'hottest class':>22}{'WCU/s':>11}{'used':>8}{'headroom':>10}"
    )
    for row in model.index_headroom(measured, load, deploy):
        room = "idle" if row.headroom == float("inf") else f"{row.headroom:,.1f}x"
        print(
            f"  {row.index:<12}{row.shards:>7}{row.hottest:>22}"
            f"{row.write_units_per_second:>11,.2f}{row.share_of_limit:>8.1%}{room:>10}"
        )

    print("\nhottest partitions (write units/s on one partition; limit 1,000)")
    for rate in model.partition_rates(measured, load, deploy):
        if rate.name == model.RUN_PARTITION:
            continue
        where = f"1 of {rate.shards}" if rate.shards > 1 else "unsharded"
        wcu = rate.write_units_per_second
        print(f"  {rate.name:<22}{where:>10} {wcu:>10,.2f} WCU/s  {rate.share_of_limit:>7.1%}")
    own = measured.partition_writes.get(model.RUN_PARTITION, 0.0)
    print(f"  (a run's own partition takes only that run's {own:g} WRU, whatever the load)")

    lag = model.maintenance_lag(measured, load, deploy)
    print("\nmaintenance")
    print(
        f"  timers due {lag.due_per_second:,.2f}/s; one invocation fires "
        f"{lag.fire_per_second:,.1f}/s while firing; the schedule allows "
        f"{lag.capacity_per_second:,.2f}/s (cap {lag.cap_per_second:,.2f}/s)"
    )
    if lag.keeps_up:
        print(f"  keeps up: a timer fires at most {lag.lateness_seconds:,.1f} s after it falls due")
    else:
        print(
            f"  FALLS BEHIND by {count(lag.backlog_per_hour)} timers an hour; after one hour "
            f"of this load a timer fires {lag.lateness_seconds / 60:,.0f} min late"
        )
        print("  (the maintenance GB-s above price firing every timer, which it cannot do in time)")

    peers = model.peers_per_day(load)
    print("\ndollars (on-demand list prices, us-east-1, 2026-12)")
    print(f"  {'':<38}{'$ per day':>12}{'$ per M runs':>14}")
    rows = [
        ("weft-serverless, all of it", total),
        ("  of which DynamoDB", ddb_usd),
        ("  of which Lambda", lam_usd),
        (f"  of which API Gateway ({deploy.api} API)", gateway_usd),
        ("  of which EventBridge", sched_usd),
        ("Lambda durable functions", peers.durable_dollars()),
        ("Step Functions Standard", peers.step_functions_dollars()),
    ]
    for name, dollars in rows:
        print(f"  {name:<38}{dollars:>12,.2f}{model.per_million_runs(dollars, load):>14,.2f}")
    print(
        f"  (durable functions: {count(peers.durable_operations)} operations and "
        f"{peers.durable_gb_written:,.2f} GB written a day; Step Functions: "
        f"{count(peers.step_transitions)} transitions a day; their compute is not counted)"
    )


def parse_shards(text: str) -> int | dict[str, int]:
    """``8`` (every index) or ``timers=16,claims=16`` (those; the rest keep the default),
    checked as ``Engine.create(shards=...)`` checks them."""
    try:
        if text.isdigit():
            check_shards(dict.fromkeys(keys.INDEXES, int(text)))
            return int(text)
        pairs = dict(part.split("=", 1) for part in text.split(","))
        counts = {name.strip(): int(value) for name, value in pairs.items()}
        check_shards(counts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"8 or timers=16,claims=16, not {text!r}") from None
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs-per-day", default="1000000", help="one load, or several: 1e6,1e7,1e8"
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sleeps", type=int, default=1)
    parser.add_argument("--signals", type=int, default=1)
    parser.add_argument("--result-bytes", type=int, default=700)
    parser.add_argument(
        "--ownership", default="workflow-lease", choices=["none", "lease", "workflow-lease"]
    )
    parser.add_argument(
        "--shards",
        type=parse_shards,
        default=None,
        help="shards per index, as the store is created with them: one count for every "
        "index (8) or some of them (timers=16,claims=16; the rest "
        f"{keys.DEFAULT_COUNT}); indexes: {', '.join(keys.INDEXES)}",
    )
    parser.add_argument(
        "--tick", type=float, default=0.0, help="WEFT_MAINTENANCE_TICK_SECONDS (0: one pass)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs measured (median times)")
    parser.add_argument("--timers", type=int, default=200, help="timers one measured pass fires")
    args = parser.parse_args()
    # The virtual clock runs years behind moto's wall clock on purpose (timers fall due when
    # the bench says): the skew warning it raises says nothing about the figures.
    logging.getLogger("weft_serverless.engine").setLevel(logging.ERROR)
    warnings.simplefilter("ignore", ClockSkewDetected)
    loads = [
        model.Load(float(runs), args.steps, args.sleeps, args.signals, args.result_bytes)
        for runs in args.runs_per_day.split(",")
    ]
    deploy = deployment(args.shards, args.tick)
    measured, extra = measure(args.ownership, loads[0], args.timers, args.repeat)
    report_measured(measured, extra, loads[0], deploy, args.ownership)
    report_limits(measured, loads[0], deploy)
    for load in loads:
        report_load(measured, load, deploy)


if __name__ == "__main__":
    main()
