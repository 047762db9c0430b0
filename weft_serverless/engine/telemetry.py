"""What the engine tells operators: its logger, process-local counters, and warnings.

The lowest floor of the engine: every module may import it, it imports no engine module.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

from weft_serverless.errors import WeftError

logger = logging.getLogger("weft_serverless.engine")


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


def warn(category: type[Warning], message: str, level: int = logging.WARNING) -> None:
    """Emit a warning of ``category`` and log it (routine cases log below WARNING)."""
    logger.log(level, message)
    warnings.warn(message, category, stacklevel=3)


def skip_unsupported(metrics: Metrics, error: WeftError) -> None:
    """A background pass leaves a record of an unknown format as it is: warn, count, go on."""
    metrics.incr("records_skipped_unsupported")
    logger.warning("skipped a record this engine cannot read: %s", error)
