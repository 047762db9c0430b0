"""How far this engine's clock runs ahead of the store's, and what it may not do while it does.

Claim expiry and timers compare times written by one engine's clock with another's. An
engine running ahead by more than ``ttl + renew_interval`` deposes healthy owners, and any
lead fires timers early by as much. Where the store has a clock (``Storage.clock_offset``),
an engine ahead of it by more than ``max_clock_skew`` takes over no claim and fires timers by
the store's time, with a ``ClockSkewDetected`` warning and metrics (ADR 0014). Stores
without a clock (memory, SQLite) are shared by processes of one machine: nothing changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from weft_serverless.engine.process.telemetry import Metrics, logger, warn
from weft_serverless.errors import ClockSkewDetected
from weft_serverless.storage.base import Storage


@dataclass(frozen=True, slots=True)
class Skew:
    """This engine's clock minus the store's, in seconds: between ``low`` and ``high``."""

    low: float
    high: float


class ClockGuard:
    """Judges the engine's lead over the store's clock against ``limit`` (None: never)."""

    def __init__(
        self,
        storage: Storage,
        metrics: Metrics,
        limit: float | None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.metrics = metrics
        self.limit = limit
        self.wall = wall

    def skew(self, now: float) -> Skew | None:
        """Bounds on (engine time ``now`` - store time), or ``None`` when the store has no clock."""
        if self.limit is None:
            return None
        offset = self.storage.clock_offset()
        if offset is None:
            return None
        local = now - self.wall()  # the engine's clock against this process's wall clock
        return Skew(local - offset.high, local - offset.low)

    def ahead(self, now: float) -> Skew | None:
        """The skew when the engine is surely ahead by more than the limit, else ``None``."""
        skew = self.skew(now)
        if skew is None or self.limit is None or skew.low <= self.limit:
            return None
        return skew

    def allows_takeover(self, what: str, now: float) -> bool:
        """Whether an expiry judged at ``now`` may be acted on; refusals warn and count."""
        skew = self.ahead(now)
        if skew is None:
            return True
        self.metrics.incr("clock_skew.takeovers_refused")
        warn(
            ClockSkewDetected,
            f"{what}: takeover refused, this engine's clock runs at least {skew.low:.1f}s "
            f"ahead of the store's (max_clock_skew={self.limit}s); synchronise it (NTP)",
        )
        return False

    def timer_cutoff(self, now: float) -> float:
        """Fire timers due by this time: ``now``, or the store's time while running ahead.

        The store's time is taken at its lower bound, so no timer fires before the store's
        clock says it is due; a lead within the limit changes nothing. Publishes the
        estimate (midpoint, ms) as the ``clock_skew_ms`` gauge once per pass.
        """
        skew = self.skew(now)
        if skew is None:
            return now
        self.metrics.counters["clock_skew_ms"] = round((skew.low + skew.high) * 500)
        if self.limit is not None and skew.high < -self.limit:
            # Harmless for what this engine does, but synchronised engines may judge its
            # claims expired early: say so (a log line, as this is another engine's risk).
            self.metrics.incr("clock_skew.passes_behind")
            logger.warning(
                "this engine's clock runs at least %.1fs behind the store's (max_clock_skew="
                "%ss): other engines may take over its claims early; synchronise it (NTP)",
                -skew.high,
                self.limit,
            )
        if self.limit is None or skew.low <= self.limit:
            return now
        self.metrics.incr("clock_skew.passes_held_back")
        warn(
            ClockSkewDetected,
            f"this engine's clock runs at least {skew.low:.1f}s ahead of the store's "
            f"(max_clock_skew={self.limit}s): timers fire by the store's clock and no claim "
            "is taken over until it is synchronised (NTP)",
        )
        return now - skew.high
