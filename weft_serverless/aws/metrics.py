"""Engine counters as CloudWatch metrics, printed in the Embedded Metric Format (EMF).

The engine keeps process-wide counters that only grow; a container serves many invocations,
so each invocation emits the difference between a snapshot taken at its start and one taken
at its end. Lambda ships stdout to CloudWatch Logs, which turns EMF lines into metrics with
no API call. Names are the counters' own in CamelCase (``claim_attempts.takeover`` ->
``ClaimAttemptsTakeover``), so a new engine counter shows up without a change here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from weft_serverless import Engine

NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"
DEFAULT_NAMESPACE = "Weft"
HANDLER_DIMENSION = "Handler"

# Always emitted (zero included), so alarms and dashboards see a continuous series.
CORE_COUNTERS = (
    ("StepsCommitted", "steps_committed"),
    ("ActivityAttempts", "activity_attempts"),
    ("ActivityRetries", "activity_retries"),
    ("TimersFired", "timers_fired"),
    ("WorkflowsCompleted", "workflows_completed"),
    ("WorkflowsFailed", "workflows_failed"),
    ("LostCommits", "lost_commits"),
)
# Engine counters that hold a current value rather than a running total.
GAUGES = frozenset({"claims_active", "clock_skew_ms"})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The engine's counters at one moment."""

    core: dict[str, int]
    counters: dict[str, int]

    @classmethod
    def of(cls, engine: Engine) -> Snapshot:
        metrics = engine.runtime.metrics
        core = {name: int(getattr(metrics, attr)) for name, attr in CORE_COUNTERS}
        return cls(core, dict(metrics.counters))


@dataclass(slots=True)
class InvocationMetrics:
    """What one invocation adds to CloudWatch: counter deltas plus its own observations."""

    counts: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> InvocationMetrics:
        counts: dict[str, float] = {
            name: after.core[name] - before.core[name] for name in before.core
        }
        for counter, value in sorted(after.counters.items()):
            if counter in GAUGES:
                counts[metric_name(counter)] = value
            elif value != before.counters.get(counter, 0):
                counts[metric_name(counter)] = value - before.counters.get(counter, 0)
        return cls(counts)


def metric_name(counter: str) -> str:
    """``claim_attempts.lost_race`` -> ``ClaimAttemptsLostRace``."""
    words = counter.replace(".", "_").split("_")
    return "".join(word[:1].upper() + word[1:] for word in words if word)


def flush(values: InvocationMetrics, handler: str) -> None:
    """Print one EMF document for ``values`` with a ``Handler`` dimension (api, maintenance).

    A fresh provider each time keeps these metrics apart from any the user's code adds with
    its own ``Metrics()`` (powertools shares those across instances).
    """
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    metrics = EphemeralMetrics(namespace=os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE)
    metrics.add_dimension(HANDLER_DIMENSION, handler)
    for name, value in values.counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for name, value in values.seconds.items():
        metrics.add_metric(name=name, unit=MetricUnit.Seconds, value=value)
    if values.counts or values.seconds:
        metrics.flush_metrics()
    metrics.clear_metrics()  # flush keeps them when POWERTOOLS_METRICS_DISABLED is set
