"""The arithmetic of ``bench/capacity.py``: measured per-operation figures in, daily load out.

Kept apart from the measurement so every formula can be checked on a small synthetic
measurement without moto (tests/unit/test_capacity_model.py). Nothing here is measured and
nothing is typed in but prices and AWS limits: every per-run, per-pass and per-timer figure
comes in through ``Measured``.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

SECONDS_PER_DAY = 86_400
DAYS_PER_MONTH = 30.4375  # 365.25 / 12, to spread monthly free tiers over days

# On-demand list prices, us-east-1, as of 2026-12 (docs/scaling.md lists them with sources).
DYNAMODB_WRU_USD = 0.625 / 1e6
DYNAMODB_RRU_USD = 0.125 / 1e6
LAMBDA_REQUEST_USD = 0.20 / 1e6
LAMBDA_GB_SECOND_USD = 0.0000133334  # arm64
API_GATEWAY_USD = {"rest": 3.50 / 1e6, "http": 1.00 / 1e6}  # per request, first tier
SCHEDULER_INVOCATION_USD = 1.00 / 1e6
SCHEDULER_FREE_PER_MONTH = 14_000_000
DURABLE_OPERATION_USD = 8.00 / 1e6
DURABLE_GB_WRITTEN_USD = 0.25
STEP_FUNCTIONS_TRANSITION_USD = 25.00 / 1e6

PARTITION_WRITE_LIMIT = 1000  # write units per second one DynamoDB partition accepts
PARTITION_READ_LIMIT = 3000  # strongly consistent read units per second
TABLE_UNIT_QUOTA = 40_000  # default per-table quota of an on-demand table, reads and writes each
LAMBDA_CONCURRENCY_QUOTA = 1000  # default concurrent executions per account and Region
LAMBDA_MB_PER_VCPU = 1769  # Lambda gives a function one vCPU at 1,769 MB, in proportion below

RUN_PARTITION = "wf"
"""Class of a run's own partition: only that run writes it, so load never makes it hotter."""


@dataclass(frozen=True)
class Load:
    """The workload: how many runs a day and what each does."""

    runs_per_day: float
    steps: int = 10
    sleeps: int = 1
    signals: int = 1
    result_bytes: int = 700

    @property
    def runs_per_second(self) -> float:
        return self.runs_per_day / SECONDS_PER_DAY


@dataclass(frozen=True)
class Deployment:
    """What the CDK construct deploys (read from infra/ by the script, not typed in)."""

    maintenance_rate_seconds: float = 60.0
    maintenance_timeout_seconds: float = 55.0
    maintenance_memory_mb: int = 256
    api_memory_mb: int = 512
    api_throttle_rate: float = 100.0
    api: str = "rest"
    max_timers_per_pass: int = 1000
    shards: int | Mapping[str, int] = 4
    """Shards per index (``timers``, ``status``, ``claims``, ``visibility``, ``outbox``, as
    ``Engine.create(shards=...)`` takes them; unlisted: 4), or one count for all of them."""
    tick_seconds: float = 0.0
    """``WEFT_MAINTENANCE_TICK_SECONDS``: 0 runs one pass per invocation, else one per tick."""
    maintenance_workers: int = 1
    """Maintenance invocations a tick, each firing its share of the timer shards."""

    @property
    def passes_per_day(self) -> float:
        return SECONDS_PER_DAY / self.maintenance_rate_seconds

    def shards_of(self, partition_class: str) -> int:
        """The deployed shard count of a sharded partition class (``status#running``: the
        status index's)."""
        return count_of(self.shards, partition_class)


DEFAULT_SHARDS = 4
INDEXES = ("timers", "status", "claims", "visibility", "outbox")
"""The sharded indexes, as ``Engine.create(shards=...)`` names them."""


def index_of(partition_class: str) -> str | None:
    """The index a sharded partition class belongs to (None: not a sharded index).

    ``status#running`` -> ``status``; ``sa#customer`` and ``tag`` -> ``visibility``.
    """
    head = partition_class.split("#", 1)[0]
    return {"sa": "visibility", "tag": "visibility"}.get(head) or (
        head if head in ("timers", "status", "claims", "outbox") else None
    )


def count_of(shards: int | Mapping[str, int], partition_class: str) -> int:
    if isinstance(shards, int):
        return shards
    index = index_of(partition_class)
    return shards.get(index, DEFAULT_SHARDS) if index is not None else 1


DEPLOYMENT_SETTINGS = (
    "rate",
    "maintenance_timeout",
    "maintenance_memory_mb",
    "maintenance_workers",
    "api_memory_mb",
    "api_throttle_rate",
)
"""What ``construct_defaults`` must find in the construct for ``Deployment``."""


def construct_defaults(source: str) -> tuple[dict[str, float], dict[str, str]]:
    """The CDK construct's defaults, read from its source so no CDK import is needed.

    Numbers and strings are the constructor's keyword defaults; durations are the
    ``name = argument or Duration.minutes(1)`` fallbacks, in seconds.
    """
    found: dict[str, float] = {}
    strings: dict[str, str] = {}
    seconds = {"seconds": 1, "minutes": 60, "hours": 3600}
    tree = ast.parse(source)
    named = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for arg, given in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
                default = named.get(given.id, given) if isinstance(given, ast.Name) else given
                if not isinstance(default, ast.Constant) or isinstance(default.value, bool):
                    continue
                if isinstance(default.value, int | float):
                    found[arg.arg] = float(default.value)
                elif isinstance(default.value, str):
                    strings[arg.arg] = default.value
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.BoolOp):
            target, call = node.targets[0], node.value.values[-1]
            if (
                isinstance(target, ast.Name)
                and isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in seconds
                and call.args
                and isinstance(call.args[0], ast.Constant)
            ):
                found[target.id] = float(call.args[0].value) * seconds[call.func.attr]
    return found, strings


def construct_constant(source: str, name: str) -> object:
    """A module-level literal of the construct (``DEFAULT_NEW_TABLE_SHARDS``), read from
    its source."""
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
        ):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def at_run_write_units(measured: Measured, write_units: float) -> Measured:
    """The same measurement with a run's write units at ``write_units``, spread over its
    partitions as measured: what the limits become when a run is written for less."""
    factor = write_units / measured.run.write_units if measured.run.write_units else 0.0
    run = Units(measured.run.requests, write_units, measured.run.read_units)
    writes = {name: units * factor for name, units in measured.partition_writes.items()}
    return replace(measured, run=run, partition_writes=writes)


@dataclass(frozen=True)
class Units:
    """Requests and request units of something measured once."""

    requests: float = 0.0
    write_units: float = 0.0
    read_units: float = 0.0

    def __add__(self, other: Units) -> Units:
        return Units(
            self.requests + other.requests,
            self.write_units + other.write_units,
            self.read_units + other.read_units,
        )

    def __sub__(self, other: Units) -> Units:
        return Units(
            self.requests - other.requests,
            self.write_units - other.write_units,
            self.read_units - other.read_units,
        )

    def times(self, factor: float) -> Units:
        return Units(self.requests * factor, self.write_units * factor, self.read_units * factor)

    def dollars(self) -> float:
        return self.write_units * DYNAMODB_WRU_USD + self.read_units * DYNAMODB_RRU_USD


@dataclass(frozen=True)
class Measured:
    """Per-operation figures measured in one run of ``bench/capacity.py``.

    ``run`` is one whole run of the workload (its start, the passes that fired its timers
    counted above an idle pass, its signals, its end). ``partition_writes`` holds the write
    units that run put on each partition class (``timers``, ``status#running``, ``wf``...),
    ``measured_shards`` the shard count of each sharded class when it was measured.
    ``idle_pass`` is a maintenance pass with nothing due, ``idle_partition_writes`` its
    write units by partition class (an engine lease it renews), ``idle_shard_requests`` the
    part of its requests that read sharded partitions, by class (they scale with shards).
    Durations are local wall seconds, a stand-in for Lambda duration.
    """

    run: Units
    partition_writes: Mapping[str, float]
    measured_shards: Mapping[str, int]
    idle_pass: Units
    idle_shard_requests: Mapping[str, float]
    timer_fire: Units
    start_seconds: float
    signal_seconds: float
    idle_pass_seconds: float
    fire_seconds_per_timer: float
    idle_partition_writes: Mapping[str, float] = field(default_factory=dict)
    worker_fire_rate: float = 0.0
    """Timers one worker fires a second with its parallel fires, each request a network
    round trip (``bench/firing_workers.py``); 0: only ``fire_seconds_per_timer`` (serial)."""
    fire_cpu_seconds: float = 0.0
    """Process CPU seconds one fire takes: a worker with a fraction of a vCPU is bound by it."""


def partition_class(partition: str) -> str:
    """A partition's class: its name without the shard number and without a run's id.

    ``timers#03`` -> ``timers``; ``status#running#01`` -> ``status#running``;
    ``wf#abc`` -> ``wf``; ``meta`` -> ``meta``.
    """
    if partition.startswith("wf#"):
        return RUN_PARTITION
    return re.sub(r"#\d+$", "", partition)


def is_sharded(partition: str) -> bool:
    """Whether the partition is one shard of a hash-sharded global index."""
    return not partition.startswith("wf#") and re.search(r"#\d+$", partition) is not None


def idle_pass_at(measured: Measured, shards: int | Mapping[str, int]) -> Units:
    """An idle pass with ``shards`` shards (one count, or one per index): the per-shard
    reads scale, the rest stays.

    Each shard read of an empty range is one request of one read unit (DynamoDB bills a
    query of nothing as one unit).
    """
    extra = 0.0
    for name, requests in measured.idle_shard_requests.items():
        extra += requests / measured.measured_shards.get(name, 1) * count_of(shards, name)
        extra -= requests
    return measured.idle_pass + Units(requests=extra, read_units=extra)


@dataclass(frozen=True)
class DynamoDay:
    runs: Units
    maintenance: Units

    @property
    def total(self) -> Units:
        return self.runs + self.maintenance


def dynamodb_per_day(measured: Measured, load: Load, deploy: Deployment) -> DynamoDay:
    """Runs (each measured whole, timer fires included) plus idle maintenance passes."""
    runs = measured.run.times(load.runs_per_day)
    passes = idle_pass_at(measured, deploy.shards).times(deploy.passes_per_day)
    return DynamoDay(runs, passes)


def table_rates(day: DynamoDay) -> tuple[float, float]:
    """Mean write and read units per second the table takes (the quota is per second)."""
    return day.total.write_units / SECONDS_PER_DAY, day.total.read_units / SECONDS_PER_DAY


@dataclass(frozen=True)
class LambdaDay:
    api_invocations: float
    api_gb_seconds: float
    maintenance_invocations: float
    maintenance_gb_seconds: float
    api_concurrency: float
    api_requests_per_second: float

    @property
    def invocations(self) -> float:
        return self.api_invocations + self.maintenance_invocations

    @property
    def gb_seconds(self) -> float:
        return self.api_gb_seconds + self.maintenance_gb_seconds

    def dollars(self) -> float:
        return self.invocations * LAMBDA_REQUEST_USD + self.gb_seconds * LAMBDA_GB_SECOND_USD


def lambda_per_day(measured: Measured, load: Load, deploy: Deployment) -> LambdaDay:
    """API: one invocation per start and per signal; maintenance: one per scheduled tick.

    Maintenance time is the idle part of every pass plus the measured time per fired timer.
    API concurrency is Little's law on the mean arrival rate (peaks need more).
    """
    api_calls = load.runs_per_day * (1 + load.signals)
    api_seconds = load.runs_per_day * (
        measured.start_seconds + load.signals * measured.signal_seconds
    )
    timers = load.runs_per_day * load.sleeps
    maint_seconds = (
        deploy.passes_per_day * deploy.maintenance_workers * measured.idle_pass_seconds
        + timers * measured.fire_seconds_per_timer
    )
    return LambdaDay(
        api_invocations=api_calls,
        api_gb_seconds=api_seconds * deploy.api_memory_mb / 1024,
        maintenance_invocations=deploy.passes_per_day * deploy.maintenance_workers,
        maintenance_gb_seconds=maint_seconds * deploy.maintenance_memory_mb / 1024,
        api_concurrency=api_seconds / SECONDS_PER_DAY,
        api_requests_per_second=api_calls / SECONDS_PER_DAY,
    )


def api_gateway_dollars_per_day(lam: LambdaDay, deploy: Deployment) -> float:
    """Each API invocation is one API Gateway request, at the stage type's price."""
    return lam.api_invocations * API_GATEWAY_USD[deploy.api]


def scheduler_dollars_per_day(invocations_per_day: float) -> float:
    """EventBridge Scheduler: $1 per million invocations after 14 million free a month."""
    billable = max(0.0, invocations_per_day * DAYS_PER_MONTH - SCHEDULER_FREE_PER_MONTH)
    return billable * SCHEDULER_INVOCATION_USD / DAYS_PER_MONTH


@dataclass(frozen=True)
class PartitionRate:
    name: str
    shards: int
    write_units_per_second: float

    @property
    def share_of_limit(self) -> float:
        return self.write_units_per_second / PARTITION_WRITE_LIMIT


def partition_rates(measured: Measured, load: Load, deploy: Deployment) -> list[PartitionRate]:
    """Write units per second on one partition of each class at this load, hottest first.

    A sharded class's writes spread evenly over its index's shards (runs hash to
    shards by id); an unsharded shared partition takes all of them. A run's own partition
    takes only that run's writes: its figure is the run's mean over a day, which no load
    changes (a burst of one run's steps is bounded by one engine's commit rate). Idle
    passes add their own writes once a tick, whatever the load.
    """
    rates = []
    passes_per_second = deploy.passes_per_day / SECONDS_PER_DAY
    for name in {**measured.partition_writes, **measured.idle_partition_writes}:
        units = measured.partition_writes.get(name, 0.0)
        if name == RUN_PARTITION:
            rates.append(PartitionRate(name, 0, units / SECONDS_PER_DAY))
            continue
        shards = deploy.shards_of(name) if name in measured.measured_shards else 1
        idle = measured.idle_partition_writes.get(name, 0.0) * passes_per_second
        rates.append(PartitionRate(name, shards, (units * load.runs_per_second + idle) / shards))
    return sorted(rates, key=lambda rate: rate.write_units_per_second, reverse=True)


@dataclass(frozen=True)
class IndexHeadroom:
    """One index at one load: its shards, the hottest of its partition classes and the write
    units a second one shard of it takes, against DynamoDB's per-partition limit."""

    index: str
    shards: int
    hottest: str
    write_units_per_second: float

    @property
    def share_of_limit(self) -> float:
        return self.write_units_per_second / PARTITION_WRITE_LIMIT

    @property
    def headroom(self) -> float:
        """How many times this load one shard still takes before its limit (inf: idle)."""
        if not self.write_units_per_second:
            return math.inf
        return PARTITION_WRITE_LIMIT / self.write_units_per_second


def index_headroom(measured: Measured, load: Load, deploy: Deployment) -> list[IndexHeadroom]:
    """Each sharded index's hottest class at this load, with the deployed counts, least
    headroom first; an index the workload never wrote comes last, idle (class ``-``)."""
    hottest: dict[str, PartitionRate] = {}
    for rate in partition_rates(measured, load, deploy):
        index = index_of(rate.name)
        if index is None or rate.name not in measured.measured_shards:
            continue
        if (
            index not in hottest
            or rate.write_units_per_second > hottest[index].write_units_per_second
        ):
            hottest[index] = rate
    rows = [
        IndexHeadroom(index, rate.shards, rate.name, rate.write_units_per_second)
        if (rate := hottest.get(index)) is not None
        else IndexHeadroom(
            index, deploy.shards_of("tag" if index == "visibility" else index), "-", 0.0
        )
        for index in INDEXES
    ]
    return sorted(rows, key=lambda row: row.headroom)


def shards_needed(units_per_run: float, load: Load, headroom: float = 0.5) -> int:
    """Shards that keep one shard under ``headroom`` of the per-partition write limit."""
    rate = units_per_run * load.runs_per_second
    return max(1, math.ceil(rate / (PARTITION_WRITE_LIMIT * headroom)))


@dataclass(frozen=True)
class Lag:
    due_per_second: float
    fire_per_second: float
    cap_per_second: float
    capacity_per_second: float
    pass_busy_seconds: float

    @property
    def keeps_up(self) -> bool:
        return self.due_per_second <= self.capacity_per_second

    @property
    def backlog_per_hour(self) -> float:
        return max(0.0, self.due_per_second - self.capacity_per_second) * 3600

    @property
    def lateness_seconds(self) -> float:
        """Worst lateness while it keeps up: a tick's wait plus the pass's own firing time.

        When it does not keep up, lateness after one hour of load: the backlog left, at the
        rate the passes work it off.
        """
        if self.keeps_up:
            return self.pass_busy_seconds
        return self.backlog_per_hour / self.capacity_per_second


def worker_fire_rate(measured: Measured, deploy: Deployment) -> float:
    """Timers one maintenance worker fires a second while firing: its measured rate with
    parallel fires, bound by the CPU its memory buys (a fire's CPU time at a fraction of a
    vCPU); without a parallel measurement, one timer after another."""
    serial = 1.0 / measured.fire_seconds_per_timer if measured.fire_seconds_per_timer else math.inf
    if not measured.worker_fire_rate:
        return serial
    cpu = deploy.maintenance_memory_mb / LAMBDA_MB_PER_VCPU
    cpu_bound = cpu / measured.fire_cpu_seconds if measured.fire_cpu_seconds else math.inf
    return min(measured.worker_fire_rate, cpu_bound)


def maintenance_lag(measured: Measured, load: Load, deploy: Deployment) -> Lag:
    """Due timers per second at this load against what the scheduled workers can fire.

    Each tick invokes ``maintenance_workers`` workers (reserved concurrency keeps a worker's
    ticks from overlapping), each on its share of the timer shards. A worker runs one pass,
    or one every ``tick_seconds``; a pass that fired its cap (``max_timers_per_pass``) is
    followed at once by another, so a backlog is fired at the worker's rate for as long as
    its invocation lasts. Shards spread writes; workers add firing.
    """
    due = load.runs_per_second * load.sleeps
    fire = worker_fire_rate(measured, deploy)
    every = deploy.tick_seconds or deploy.maintenance_rate_seconds
    workers = deploy.maintenance_workers
    cap = workers * deploy.max_timers_per_pass / every
    in_time = workers * fire * deploy.maintenance_timeout_seconds / deploy.maintenance_rate_seconds
    due_per_pass = due * every / workers
    busy = every + min(due_per_pass, deploy.max_timers_per_pass) / fire
    return Lag(due, fire * workers, cap, in_time, busy)


def limits(measured: Measured, load: Load, deploy: Deployment) -> list[tuple[str, float, str]]:
    """Runs a day (mean rate) at which each limit is reached, lowest first, with its knob.

    Every figure above grows in proportion to runs a day, so each limit is crossed at one
    load: the limit over what one run a day spends of it. Peaks above the mean reach each
    limit at a proportionally lower daily count.
    """
    found: list[tuple[str, float, str]] = []
    one = Load(SECONDS_PER_DAY, load.steps, load.sleeps, load.signals, load.result_bytes)
    if load.sleeps:
        lag = maintenance_lag(measured, one, deploy)
        found.append(
            (
                "maintenance fires timers as fast as they fall due",
                lag.capacity_per_second / load.sleeps * SECONDS_PER_DAY,
                "maintenance_workers (up to the timer shard count), "
                "maintenance_parallel_fires, maintenance_memory_mb",
            )
        )
    api = lambda_per_day(measured, one, deploy)
    found.append(
        (
            "API stage throttle",
            deploy.api_throttle_rate / api.api_requests_per_second * SECONDS_PER_DAY,
            "api_throttle_rate, api_throttle_burst",
        )
    )
    if api.api_concurrency:
        found.append(
            (
                "Lambda concurrent executions (account default)",
                (LAMBDA_CONCURRENCY_QUOTA - deploy.maintenance_workers)
                / api.api_concurrency
                * SECONDS_PER_DAY,
                "a quota increase; reserved concurrency for the API function",
            )
        )
    for rate in partition_rates(measured, one, deploy):
        if rate.name != RUN_PARTITION and rate.write_units_per_second:
            found.append(
                (
                    f"partition write limit on {rate.name} ({rate.shards} shards)",
                    PARTITION_WRITE_LIMIT / rate.write_units_per_second * SECONDS_PER_DAY,
                    f"the {index_of(rate.name)} shard count, chosen when the store is created "
                    "(Engine.create(shards=...), ADR 0050)",
                )
            )
    day = dynamodb_per_day(measured, one, deploy)
    for what, units in zip(("write", "read"), table_rates(day), strict=True):
        if units:
            found.append(
                (
                    f"table {what} quota (on-demand default)",
                    TABLE_UNIT_QUOTA / units * SECONDS_PER_DAY,
                    "a quota increase",
                )
            )
    return sorted(found, key=lambda limit: limit[1])


@dataclass(frozen=True)
class Peers:
    durable_operations: float
    durable_gb_written: float
    step_transitions: float

    def durable_dollars(self) -> float:
        return (
            self.durable_operations * DURABLE_OPERATION_USD
            + self.durable_gb_written * DURABLE_GB_WRITTEN_USD
        )

    def step_functions_dollars(self) -> float:
        return self.step_transitions * STEP_FUNCTIONS_TRANSITION_USD


def peers_per_day(load: Load) -> Peers:
    """The same workload on Lambda durable functions and Step Functions Standard.

    Durable functions: one operation per step, per wait and per callback (a signal), and
    each step's result checkpointed (bytes written). Step Functions: one transition per Task
    (a step), per Wait state (a sleep) and per ``.waitForTaskToken`` task (a signal); the
    Choice and Succeed states a real machine adds are not counted, so this is its floor.
    Compute billed on top of both is left out.
    """
    per_run = load.steps + load.sleeps + load.signals
    gb = load.steps * load.result_bytes / 1e9
    return Peers(per_run * load.runs_per_day, gb * load.runs_per_day, per_run * load.runs_per_day)


def per_million_runs(dollars_per_day: float, load: Load) -> float:
    return dollars_per_day / load.runs_per_day * 1e6 if load.runs_per_day else 0.0
