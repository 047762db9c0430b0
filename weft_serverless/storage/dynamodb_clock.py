"""The store's clock, estimated from the HTTP ``Date`` header of DynamoDB's answers.

Engines judge claim expiry and fire timers by their own clocks; comparing those clocks with
one shared reference, the store's, is how an engine notices that it runs ahead (ADR 0014).
The header has a resolution of one second and travels with a request, so each answer bounds
the offset: the service stamped it at some instant between send and receive, at a time in
``[date, date + 1)``. Answers received close together narrow the bounds by intersection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from weft_serverless.storage.base import ClockOffset

DATE_RESOLUTION = 1.0
# Bounds narrowed by answers within this many seconds of each other; an older estimate is
# replaced, so a stepped local clock is noticed within it.
NARROW_WINDOW = 300.0


class ClockEstimator:
    """Keeps the tightest recent bounds on (store clock - local wall clock)."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self._lock = threading.Lock()
        self._offset: ClockOffset | None = None
        self._seen_at = 0.0
        self._last_header = ""
        self._last_date = 0.0

    def observe(self, response: Any, sent: float, received: float) -> None:
        """Narrow the estimate with one answer sent and received at these wall-clock times."""
        header = _date_header(response)
        if header is None:
            return
        with self._lock:
            if header != self._last_header:
                try:
                    self._last_date = parsedate_to_datetime(header).timestamp()
                except (TypeError, ValueError, IndexError):
                    return
                self._last_header = header
            low, high = self._last_date - received, self._last_date + DATE_RESOLUTION - sent
            old = self._offset
            if old is not None and received - self._seen_at < NARROW_WINDOW:
                narrowed_low, narrowed_high = max(low, old.low), min(high, old.high)
                if narrowed_low <= narrowed_high:  # else a clock stepped: start again
                    low, high = narrowed_low, narrowed_high
            self._offset, self._seen_at = ClockOffset(low, high), received

    def offset(self) -> ClockOffset | None:
        """The current bounds, or ``None`` when no answer was seen within the window."""
        with self._lock:
            if self._offset is None or self.wall() - self._seen_at >= NARROW_WINDOW:
                return None
            return self._offset


def _date_header(response: Any) -> str | None:
    """The ``Date`` header botocore kept from an answer (a result or an error's response)."""
    if not isinstance(response, Mapping):
        return None
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    header = headers.get("date") if isinstance(headers, Mapping) else None
    return header if isinstance(header, str) and header else None
