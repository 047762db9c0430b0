"""Engine internals shared by the engine's modules: storage, clock, registry, settings.

The ``Engine`` facade holds one ``Runtime`` and hands it to single-concern functions
(start, drive, commit, maintenance), the way a thin facade should.

``Runtime`` is a frozen dataclass built once (``assemble``): no field is ever rebound. Its
settings (storage, clock, registry, limits, the ownership mode, the event sink, the tracer)
never change; what changes while the engine runs lives in holder objects it points at, each
with one writer, so who changes what is visible in one place:

- ``time`` (``EngineTime``): engine time; only the maintenance pass moves its floor on.
- ``invocation`` (``InvocationBudget``): time left in a serverless invocation; only the
  invocation scope sets it, and restores it on exit.
- ``closed_runs`` and ``teardowns`` (``ClosedRuns``): runs that ended leaving children to
  close, and runs given a teardown; ``transitions`` notifies them, the session drains them.
- ``freed_gates`` (``FreedGates``): concurrency keys a terminal commit freed a slot of.
- ``shutdown`` (``Shutdown``): whether the engine is closed; set by the facade's ``close``
  and by a mode that lost its store-wide fence.
- ``terminal_changed``: the condition ``result()`` waiters sleep on in automatic mode.
- ``parked`` (``ParkedRuns``), ``activity_threads``, ``attempts`` (``RunningAttempts``),
  ``services``, ``metrics``: what this process keeps in memory (``engine/process/``).
- ``clock_guard`` (``ClockGuard``): the engine's measured lead over the store's clock.

``Budget``, a maintenance pass's wall-clock allowance, is made one per pass.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from weft_serverless.codec import encode
from weft_serverless.engine.ownership import OwnerHost, Ownership
from weft_serverless.engine.process.activity_threads import DEFAULT_MAX_PARALLEL, ActivityThreads
from weft_serverless.engine.process.clock_skew import ClockGuard
from weft_serverless.engine.process.parked_runs import ParkedRuns
from weft_serverless.engine.process.running_attempts import RunningAttempts
from weft_serverless.engine.process.services import ServiceFactory, Services
from weft_serverless.engine.process.telemetry import Metrics, logger
from weft_serverless.engine.process.timer_hints import HintOutbox, TimerHints
from weft_serverless.errors import PayloadTooLargeError
from weft_serverless.event_sink import EventSink
from weft_serverless.storage.base import Storage
from weft_serverless.storage.keys.shards import ShardCounts, ShardLayout
from weft_serverless.storage.shard_layout import DEFAULT_REFRESH, LiveShards
from weft_serverless.workflow import ActivityDefinition, WorkflowDefinition

if TYPE_CHECKING:  # tracing is imported only when a tracer is given (cold starts)
    from weft_serverless.engine.process.tracing import Tracing

BackgroundTasks = Literal["manual", "automatic"]

__all__ = [
    "BackgroundTasks",
    "Budget",
    "ClosedRuns",
    "EngineTime",
    "FreedGates",
    "InvocationBudget",
    "Metrics",
    "Runtime",
    "Shutdown",
    "assemble",
    "logger",
    "payload_limit",
    "wall_clock",
]

# Room a record needs around its payload (keys, signature, timestamps, error text).
_RECORD_OVERHEAD = 8 * 1024


MAX_TIMERS_PER_PASS = 1000


@dataclass(slots=True)
class Budget:
    """A wall-clock allowance for one pass; every part checks it before starting more work.

    ``max_timers`` caps how many due timers the pass reads: what one pass does stays bounded
    however large a backlog is, and the next pass reads on.
    """

    deadline: float | None = None
    monotonic: Callable[[], float] = time.monotonic
    max_timers: int = MAX_TIMERS_PER_PASS

    def exhausted(self) -> bool:
        return self.deadline is not None and self.monotonic() >= self.deadline


class EngineTime:
    """Engine time: the clock, never behind the ``now`` a maintenance pass was given."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._floor = 0.0

    def now(self) -> float:
        now = self.clock()
        return now if now >= self._floor else self._floor

    def hold_at_least(self, moment: float) -> None:
        """A maintenance pass runs at ``moment``: time never goes back behind it."""
        self._floor = max(self._floor, moment)


class InvocationBudget:
    """Seconds left in the current serverless invocation (None: no budget); see
    ``Engine.invocation``, whose scope is the one thing that sets it."""

    def __init__(self) -> None:
        self.time_left: Callable[[], float] | None = None
        self.step_reserve = 0.0

    @contextmanager
    def within(self, time_left: Callable[[], float] | None, step_reserve: float) -> Iterator[None]:
        """Hold this budget while the block runs; the previous one is back afterwards."""
        previous = (self.time_left, self.step_reserve)
        self.time_left, self.step_reserve = time_left, step_reserve
        try:
            yield
        finally:
            self.time_left, self.step_reserve = previous

    def low_on_time(self, needed: float | None) -> bool:
        """Whether the budget is too small to start a step needing ``needed`` seconds."""
        if self.time_left is None:
            return False
        return self.time_left() < max(self.step_reserve, needed or 0.0)


class ClosedRuns:
    """Runs that reached a terminal state here leaving children to close: the transition
    that ended one notifies, and the facade drains them to close their children."""

    def __init__(self) -> None:
        self._runs: list[str] = []
        self._lock = threading.Lock()

    def notify(self, workflow_id: str) -> None:
        with self._lock:
            self._runs.append(workflow_id)

    def drain(self) -> Iterator[str]:
        """Each run noted so far and any noted meanwhile, most recent first, once."""
        while True:
            with self._lock:
                if not self._runs:
                    return
                workflow_id = self._runs.pop()
            yield workflow_id


class FreedGates(ClosedRuns):
    """Concurrency keys whose slot a terminal commit here freed with runs queued behind it:
    the engine's session admits the oldest of them once the call's drives are done, so a
    queued run starts when the slot frees (its admit timer stays as the fallback)."""


class Shutdown:
    """Whether the engine is closed for good: by ``Engine.close``, or by a mode that lost
    the fence it writes under (it can never write again)."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True, slots=True)
class Runtime:
    storage: Storage
    definitions: Mapping[str, WorkflowDefinition]
    activity_overrides: Mapping[str, Callable[..., Any]]
    clock: Callable[[], float]
    background_tasks: BackgroundTasks
    max_payload_bytes: int
    engine_id: str
    fence: Ownership
    clock_guard: ClockGuard
    metrics: Metrics
    time: EngineTime
    shutdown: Shutdown
    # Seconds to keep a finished run, per terminal status (absent: kept forever).
    retention: Mapping[str, float] = field(default_factory=dict)
    invocation: InvocationBudget = field(default_factory=InvocationBudget)
    closed_runs: ClosedRuns = field(default_factory=ClosedRuns)
    freed_gates: FreedGates = field(default_factory=FreedGates)
    # Runs a terminal commit here gave a teardown: the session runs their finalizers inline.
    teardowns: ClosedRuns = field(default_factory=ClosedRuns)
    # In automatic mode, result() waiters sleep on this and terminal commits notify it.
    terminal_changed: threading.Condition = field(default_factory=threading.Condition)
    # Generators of runs this engine parked, reused by its next drive when still current.
    parked: ParkedRuns = field(default_factory=ParkedRuns)
    # Branches of all/race/map run at once up to this many (0: one after another, inline).
    parallel_activities: int = DEFAULT_MAX_PARALLEL
    activity_threads: ActivityThreads = field(
        default_factory=lambda: ActivityThreads(DEFAULT_MAX_PARALLEL)
    )
    attempts: RunningAttempts = field(default_factory=RunningAttempts)
    # Clients for activities, built by the services factory on first ask (services.py).
    services: Services = field(default_factory=Services)
    # Where terminal and failure events are published (None: no outbox is written).
    events: EventSink | None = None
    # Spans for drives and attempts (None: no tracer, no tracing code runs; tracing.py).
    tracer: Tracing | None = None
    # The store's shard layout, read when the engine opened it and again before any index
    # write or read once the copy is ``refresh`` old (ADR 0050).
    layout: LiveShards = field(default_factory=LiveShards.fixed)
    # Hints of timers armed soon, sent after their commit (ADR 0054; no port: nothing sent).
    hints: HintOutbox = field(default_factory=lambda: HintOutbox(None, time.time, Metrics()))

    @property
    def closed(self) -> bool:
        return self.shutdown.closed

    @property
    def shards(self) -> ShardCounts:
        """The counts an index item is written under now (asked only by index writes)."""
        return self.layout.current().write

    @property
    def shard_layout(self) -> ShardLayout:
        """The layout now, for a writer that deletes an index item by a recomputed key."""
        return self.layout.current()

    @property
    def shards_to_read(self) -> ShardCounts:
        """The shards an index reader scans now: both layouts' while the counts change."""
        return self.layout.current().read

    @property
    def time_left(self) -> Callable[[], float] | None:
        """The current invocation's time left (None outside ``Engine.invocation``)."""
        return self.invocation.time_left

    @property
    def inline_activities(self) -> bool:
        """Whether branches of all/race/map run one after another, inline
        (``max_parallel_activities=0``)."""
        return self.parallel_activities == 0

    def now(self) -> float:
        """Engine time: the clock, never behind the ``now`` a maintenance pass was given."""
        time = self.time  # EngineTime.now, inlined: read three times in every step
        now = time.clock()
        return now if now >= time._floor else time._floor

    def low_on_time(self, needed: float | None) -> bool:
        """Whether the invocation budget is too small to start a step needing ``needed`` s."""
        return self.invocation.low_on_time(needed)

    def activity(self, definition: WorkflowDefinition, name: str) -> ActivityDefinition:
        declared = definition.activities[name]
        override = self.activity_overrides.get(name)
        if override is None:
            return declared
        replaced = ActivityDefinition.of(name, override)
        if replaced.verify is None and declared.verify is not None:
            replaced = dataclasses.replace(replaced, verify=declared.verify)
        if not replaced.services:  # a test double still needs what the activity declared
            replaced = dataclasses.replace(replaced, services=declared.services)
        return replaced

    def encode_payload(self, value: Any, what: str) -> bytes:
        """Encode a user value and enforce the payload limit before anything is written."""
        data = encode(value, what)
        if len(data) > self.max_payload_bytes:
            raise PayloadTooLargeError(what, len(data), self.max_payload_bytes)
        return data


def assemble(
    storage: Storage,
    definitions: Mapping[str, WorkflowDefinition],
    *,
    ownership: Callable[[OwnerHost], Ownership],
    clock: Callable[[], float] = time.time,
    activity_overrides: Mapping[str, Callable[..., Any]] | None = None,
    background_tasks: BackgroundTasks = "manual",
    max_payload_bytes: int | None = None,
    engine_id: str,
    retention: Mapping[str, float] | None = None,
    clock_skew: float | None = None,
    max_parallel_activities: int = DEFAULT_MAX_PARALLEL,
    services: ServiceFactory | None = None,
    events: EventSink | None = None,
    tracer: Tracing | None = None,
    layout: ShardLayout | None = None,
    shard_refresh: float = DEFAULT_REFRESH,
    timer_hints: TimerHints | None = None,
) -> Runtime:
    """Build a runtime in one go: its parts first, then the ownership mode on them.

    ``max_payload_bytes`` is the configured cap (None: the default, see ``payload_limit``);
    ``clock_skew`` the checked ``max_clock_skew`` (None: no check); ``services`` the
    checked services factory (not called here); ``layout`` the store's shard layout as just
    read (None: the defaults, never read again), read again every ``shard_refresh`` seconds.
    Nothing else is read yet: the caller bootstraps the mode.
    """
    metrics, engine_time, shutdown = Metrics(), EngineTime(clock), Shutdown()
    live = (
        LiveShards.fixed()
        if layout is None
        else LiveShards(storage, layout, engine_time.now, shard_refresh)
    )
    guard = ClockGuard(storage, metrics, clock_skew)
    host = OwnerHost(
        storage=storage,
        engine_id=engine_id,
        metrics=metrics,
        now=engine_time.now,
        clock_guard=guard,
        workflow_types=definitions,
        stop=shutdown.close,
        live_shards=live,
    )
    return Runtime(
        storage=storage,
        definitions=definitions,
        activity_overrides=activity_overrides if activity_overrides is not None else {},
        clock=clock,
        background_tasks=background_tasks,
        max_payload_bytes=payload_limit(storage, max_payload_bytes),
        engine_id=engine_id,
        fence=ownership(host),
        clock_guard=guard,
        metrics=metrics,
        time=engine_time,
        shutdown=shutdown,
        retention=dict(retention or {}),
        parallel_activities=max_parallel_activities,
        activity_threads=ActivityThreads(max(1, max_parallel_activities)),
        services=Services(services, metrics),
        events=events,
        tracer=tracer,
        layout=live,
        hints=HintOutbox(timer_hints, engine_time.now, metrics),
    )


def payload_limit(storage: Storage, configured: int | None) -> int:
    """The engine's payload cap: configured, but always small enough to fit one record."""
    fits = storage.capabilities().max_value_bytes - _RECORD_OVERHEAD
    return min(configured, fits) if configured is not None else min(256 * 1024, fits)


def wall_clock() -> float:
    return time.time()
