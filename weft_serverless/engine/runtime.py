"""Engine internals shared by the engine's modules: storage, clock, registry, settings.

The ``Engine`` facade holds one ``Runtime`` and hands it to single-concern functions
(start, drive, commit, maintenance), the way a thin facade should.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from weft_serverless.codec import encode
from weft_serverless.errors import PayloadTooLargeError, WeftError
from weft_serverless.storage.base import Storage
from weft_serverless.workflow import ActivityDefinition, WorkflowDefinition

from .parked_runs import ParkedRuns

if TYPE_CHECKING:
    from .clock_skew import ClockGuard
    from .ownership import Ownership

BackgroundTasks = Literal["manual", "automatic"]

logger = logging.getLogger("weft_serverless.engine")

# Room a record needs around its payload (keys, signature, timestamps, error text).
_RECORD_OVERHEAD = 8 * 1024


@dataclass(slots=True)
class Metrics:
    """Process-local counters; the Lambda layer flushes them as EMF."""

    steps_committed: int = 0
    activity_attempts: int = 0
    activity_retries: int = 0
    timers_fired: int = 0
    workflows_completed: int = 0
    workflows_failed: int = 0
    lost_commits: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def incr(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by


@dataclass
class Runtime:
    storage: Storage
    definitions: Mapping[str, WorkflowDefinition]
    activity_overrides: Mapping[str, Callable[..., Any]]
    clock: Callable[[], float]
    background_tasks: BackgroundTasks
    max_payload_bytes: int
    engine_id: str
    # Seconds to keep a finished run, per terminal status (absent: kept forever).
    retention: dict[str, float] = field(default_factory=dict)
    fence: Ownership = field(init=False)
    clock_guard: ClockGuard = field(init=False)
    metrics: Metrics = field(default_factory=Metrics)
    time_floor: float = 0.0
    closed: bool = False
    # Seconds left in the current invocation (None: no budget); see Engine.invocation.
    time_left: Callable[[], float] | None = None
    step_reserve: float = 0.0
    # Runs that reached a terminal state here; the engine then closes their children.
    closed_runs: list[str] = field(default_factory=list)
    # In automatic mode, result() waiters sleep on this and terminal commits notify it.
    terminal_changed: threading.Condition = field(default_factory=threading.Condition)
    # Generators of runs this engine parked, reused by its next drive when still current.
    parked: ParkedRuns = field(default_factory=ParkedRuns)

    def now(self) -> float:
        """Engine time: the clock, never behind the ``now`` a maintenance pass was given."""
        return max(self.clock(), self.time_floor)

    def low_on_time(self, needed: float | None) -> bool:
        """Whether the invocation budget is too small to start a step needing ``needed`` s."""
        if self.time_left is None:
            return False
        return self.time_left() < max(self.step_reserve, needed or 0.0)

    def activity(self, definition: WorkflowDefinition, name: str) -> ActivityDefinition:
        declared = definition.activities[name]
        override = self.activity_overrides.get(name)
        if override is None:
            return declared
        replaced = ActivityDefinition.of(name, override)
        if replaced.verify is None and declared.verify is not None:
            replaced = dataclasses.replace(replaced, verify=declared.verify)
        return replaced

    def encode_payload(self, value: Any, what: str) -> bytes:
        """Encode a user value and enforce the payload limit before anything is written."""
        data = encode(value, what)
        if len(data) > self.max_payload_bytes:
            raise PayloadTooLargeError(what, len(data), self.max_payload_bytes)
        return data


def skip_unsupported(rt: Runtime, error: WeftError) -> None:
    """A background pass leaves a record of an unknown format as it is: warn, count, go on."""
    rt.metrics.incr("records_skipped_unsupported")
    logger.warning("skipped a record this engine cannot read: %s", error)


def payload_limit(storage: Storage, configured: int | None) -> int:
    """The engine's payload cap: configured, but always small enough to fit one record."""
    fits = storage.capabilities().max_value_bytes - _RECORD_OVERHEAD
    return min(configured, fits) if configured is not None else min(256 * 1024, fits)


def wall_clock() -> float:
    return time.time()
