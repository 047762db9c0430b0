"""Durations and instants as callers pass them: read once, and bounded to what keys can hold.

Every duration (a sleep, a timeout, a backoff, a schedule's interval, a retention window) is
read by ``parse_duration`` and every instant (a start time, a schedule's start and end, a
list filter's bound) by ``parse_instant``, at the call that receives it, so a bad value is an
``InvalidArgumentError`` naming its argument before anything is written; inside a workflow,
that call is the line that yields it, and the run fails there (docs/decisions/0040).

The bounds come from the storage keys: a due time or a creation time is a key part of epoch
milliseconds in 16 digits (``storage.keys``), so an instant must lie in [0, 10**13) seconds
for its key to sort in time order. An instant a caller names stops at the last one a
``datetime`` (and a four-digit ISO 8601 year) can express; a duration stops at 100 years.
Every time the engine computes is such an instant plus a few such durations, far below the
key limit, and ``1e308`` no longer overflows to infinity when it becomes milliseconds.
"""

from __future__ import annotations

import datetime
import math
import re

from weft_serverless.errors import InvalidArgumentError

MAX_DURATION = 36_525 * 86_400.0
"""The longest duration, in seconds: 100 years of 365.25 days."""
MAX_INSTANT = 253_402_300_799.999
"""The latest instant, in epoch seconds: 9999-12-31T23:59:59.999Z."""
KEY_LIMIT = 10**13
"""Epoch seconds a key's 16-digit milliseconds cannot reach; instants stay far below."""

Duration = float | int | str | datetime.timedelta
"""Seconds, a ``timedelta`` or a string like ``"5m"``: what ``parse_duration`` reads."""
Instant = float | int | datetime.datetime
"""Epoch seconds or an aware ``datetime``: what ``parse_instant`` reads."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Duration, what: str = "duration") -> float:
    """Seconds from a number, a ``timedelta``, or a string like ``"500ms"``, ``"5m"``, ``"1d"``.

    A bad value (another type, negative, not finite, over ``MAX_DURATION``) raises
    ``InvalidArgumentError`` whose ``field`` is ``what``.
    """
    kinds = f"{what} must be seconds, a timedelta or a string like '5m'"
    if isinstance(value, bool):
        raise InvalidArgumentError(kinds, field=what)
    if isinstance(value, int | float):
        seconds = _as_float(value)
    elif isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise InvalidArgumentError(
                f"{what} {value!r} is not a duration; use e.g. '500ms', '10s', '5m', '2h', '1d'",
                field=what,
            )
        seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    else:
        raise InvalidArgumentError(kinds, field=what)
    if not 0 <= seconds <= MAX_DURATION:  # NaN fails too
        raise InvalidArgumentError(
            f"{what} must be from 0 to {MAX_DURATION:.0f} seconds (100 years), got {_shown(value)}",
            field=what,
        )
    return seconds


def parse_instant(value: Instant, what: str) -> float:
    """Epoch seconds from a number or a timezone-aware ``datetime``.

    A bad value (another type, a naive datetime, before 1970, after ``MAX_INSTANT``, not
    finite) raises ``InvalidArgumentError`` whose ``field`` is ``what``.
    """
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgumentError(f"{what} must be timezone-aware (e.g. UTC)", field=what)
        seconds = value.timestamp()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = _as_float(value)
    else:
        raise InvalidArgumentError(
            f"{what} must be epoch seconds or an aware datetime, got {_shown(value)}", field=what
        )
    if not 0 <= seconds <= MAX_INSTANT:  # NaN fails too
        raise InvalidArgumentError(
            f"{what} must be from 1970-01-01 to 9999-12-31 UTC (epoch seconds 0 to "
            f"{MAX_INSTANT}), got {_shown(value)}",
            field=what,
        )
    return seconds


def _as_float(value: int | float) -> float:
    """``value`` as a float; an int too large for one becomes infinity (and is refused)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _shown(value: object) -> str:
    """``value`` for a message: its repr, cut short (an int may have thousands of digits)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
