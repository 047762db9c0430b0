"""When a schedule fires: its checked definition and the fire times it gives (ADR 0024).

A fire has a nominal time ``T`` (what names its run) and a due time ``T + jitter offset``
(when the maintenance pass may start it). Cron expressions are stepped by cronsim on a
``zoneinfo`` time zone, with Debian cron's DST rules: a fixed-time fire in the skipped hour
happens right after the change, one in the repeated hour happens once (its first occurrence);
expressions that fire more often than hourly fire on every wall-clock match. Intervals
(``every``) are counted from ``start_at`` (or the epoch), so every engine computes the same
fire times without reading anything.
"""

from __future__ import annotations

import datetime
import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from weft_serverless.errors import InvalidArgumentError, InvalidScheduleError
from weft_serverless.storage.keys import is_due
from weft_serverless.time_values import MAX_INSTANT, Duration, parse_duration, parse_instant

Overlap = Literal["skip", "queue", "cancel_running", "allow"]
OVERLAPS: tuple[str, ...] = ("skip", "queue", "cancel_running", "allow")
DEFAULT_CATCHUP_WINDOW = 300.0
"""Seconds a fire may be found late and still start: longer than the usual one-minute tick."""
MAX_FIRES_COUNTED = 1000
"""The most cron fires one pass steps through to count the ones an outage missed."""


@dataclass(frozen=True, slots=True)
class Spec:
    """A schedule's checked timing and policy (times in epoch seconds, spans in seconds)."""

    cron: str | None
    every: float | None
    timezone: str
    overlap: str
    catchup_window: float
    jitter: float
    start_at: float | None
    end_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cron": self.cron,
            "every": self.every,
            "tz": self.timezone,
            "overlap": self.overlap,
            "catchup": self.catchup_window,
            "jitter": self.jitter,
            "start_at": self.start_at,
            "end_at": self.end_at,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Spec:
        return cls(
            raw["cron"],
            raw["every"],
            raw["tz"],
            raw["overlap"],
            raw["catchup"],
            raw["jitter"],
            raw["start_at"],
            raw["end_at"],
        )

    # -- fire times ------------------------------------------------------------------------

    def next_after(self, moment: float) -> float | None:
        """The first nominal fire strictly after ``moment`` within [start_at, end_at]; none
        after ``MAX_INSTANT`` (a datetime cannot name it, nor its run id)."""
        floor = moment
        if self.start_at is not None and self.start_at > moment:
            floor = math.nextafter(self.start_at, -math.inf)  # start_at itself may fire
        fire = self._step(floor) if floor < MAX_INSTANT else None
        if fire is None or fire > min(self.end_at or MAX_INSTANT, MAX_INSTANT):
            return None
        return fire

    def latest_due(self, schedule_id: str, first: float, now: float) -> tuple[float | None, int]:
        """The most recent fire from ``first`` on that is due at ``now``, and how many fires
        are due from ``first`` to it (for a cron expression, counted up to
        ``MAX_FIRES_COUNTED``: stepping cron is slow, and a longer outage is not told apart)."""
        # From a millisecond on: a fire up to then is due by the millisecond (``is_due``),
        # which is how its timer was found due.
        fire = self.at_or_before(now + 1e-3)
        while fire is not None and fire >= first and not is_due(now, self.due(schedule_id, fire)):
            fire = self.at_or_before(fire - 1e-3)  # jittered past now: the one before
        if fire is None or fire < first:
            return None, 0
        if self.every is not None:
            return fire, round((fire - first) / self.every) + 1
        count, step = 1, first
        while step < fire and count < MAX_FIRES_COUNTED:
            following = self.next_after(step)
            if following is None or following >= fire:
                break
            count, step = count + 1, following
        return fire, count + (1 if first < fire else 0)

    def at_or_before(self, moment: float) -> float | None:
        """The last nominal fire at or before ``moment`` within [start_at, end_at]."""
        moment = min(moment, MAX_INSTANT if self.end_at is None else self.end_at)
        if self.every is not None:
            anchor = self.start_at or 0.0
            fire: float | None = anchor + math.floor((moment - anchor) / self.every) * self.every
        else:
            assert self.cron is not None
            # Reverse stepping yields fires strictly before its start: start a second later.
            start = datetime.datetime.fromtimestamp(math.floor(moment) + 1, ZoneInfo(self.timezone))
            try:
                fire = next(CronSim(self.cron, start, reverse=True)).timestamp()
            except StopIteration:
                fire = None
        if fire is None or (self.start_at is not None and fire < self.start_at):
            return None
        return fire

    def due(self, schedule_id: str, fire: float) -> float:
        """When the fire may start: ``fire`` plus its jitter offset, the same on every engine."""
        if not self.jitter:
            return fire
        digest = hashlib.sha256(f"{schedule_id}|{fire!r}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / 2**64
        return fire + math.floor(fraction * self.jitter * 1000) / 1000

    def _step(self, moment: float) -> float | None:
        if self.every is not None:
            anchor = self.start_at or 0.0
            count = math.floor((moment - anchor) / self.every) + 1
            return anchor + count * self.every
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        # cronsim steps whole seconds from the moment given; drop the fraction first.
        start = datetime.datetime.fromtimestamp(math.floor(moment), zone)
        try:
            return next(CronSim(self.cron, start)).timestamp()
        except StopIteration:  # an expression that never matches again (e.g. 30 Feb)
            return None
        except OverflowError:  # the next match is after the year 9999
            return None


def build_spec(
    *,
    cron: str | None,
    every: Duration | None,
    timezone: str,
    overlap: str,
    catchup_window: Duration,
    jitter: Duration | None,
    start_at: float | datetime.datetime | None,
    end_at: float | datetime.datetime | None,
) -> Spec:
    """Check every timing argument; raise ``InvalidScheduleError`` naming the bad one."""
    if (cron is None) == (every is None):
        raise InvalidScheduleError("pass exactly one of cron and every", "cron")
    interval = None if every is None else _positive(every, "every")
    if interval is not None and interval < 1:
        raise InvalidScheduleError("every must be at least 1 second", "every")
    if cron is not None:
        _check_cron(cron)
    _check_timezone(timezone)
    if overlap not in OVERLAPS:
        raise InvalidScheduleError(
            f"overlap {overlap!r} is unknown; use one of {', '.join(OVERLAPS)}", "overlap"
        )
    window = _positive(catchup_window, "catchup_window")
    spread = 0.0 if jitter is None else _duration(jitter, "jitter")
    begin, end = instant(start_at, "start_at"), instant(end_at, "end_at")
    if begin is not None and end is not None and end < begin:
        raise InvalidScheduleError("end_at must not be before start_at", "end_at")
    return Spec(cron, interval, timezone, overlap, window, spread, begin, end)


def changed(spec: Spec, cron: str | None, every: Duration | None, overlap: str | None) -> Spec:
    """``spec`` with an update's changes applied and checked (a cron replaces an interval)."""
    if cron is not None and every is not None:
        raise InvalidScheduleError("pass cron or every, not both", "cron")
    fields: dict[str, Any] = {}
    if cron is not None:
        _check_cron(cron)
        fields.update(cron=cron, every=None)
    if every is not None:
        interval = _positive(every, "every")
        if interval < 1:
            raise InvalidScheduleError("every must be at least 1 second", "every")
        fields.update(cron=None, every=interval)
    if overlap is not None:
        if overlap not in OVERLAPS:
            raise InvalidScheduleError(
                f"overlap {overlap!r} is unknown; use one of {', '.join(OVERLAPS)}", "overlap"
            )
        fields["overlap"] = overlap
    return replace(spec, **fields)


def _check_cron(cron: object) -> None:
    if not isinstance(cron, str):
        raise InvalidScheduleError("cron must be a string like '0 2 * * *'", "cron")
    try:
        CronSim(cron, datetime.datetime.now(datetime.UTC))
    except CronSimError as exc:
        raise InvalidScheduleError(
            f"cron {cron!r} does not parse ({exc}); use five fields: minute hour "
            "day-of-month month day-of-week, e.g. '0 2 * * *'",
            "cron",
        ) from None


def _check_timezone(timezone: object) -> None:
    if not isinstance(timezone, str) or not timezone:
        raise InvalidScheduleError("timezone must be an IANA name like 'Europe/Berlin'", "timezone")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidScheduleError(
            f"timezone {timezone!r} is unknown; use an IANA name like 'Europe/Berlin' or 'UTC'",
            "timezone",
        ) from None


def _duration(value: Duration, field: str) -> float:
    try:
        return parse_duration(value, field)
    except InvalidArgumentError as exc:
        raise InvalidScheduleError(str(exc), field) from None


def _positive(value: Duration, field: str) -> float:
    seconds = _duration(value, field)
    if seconds <= 0:
        raise InvalidScheduleError(f"{field} must be more than 0 seconds", field)
    return seconds


def instant(value: float | datetime.datetime | None, field: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_instant(value, field)
    except InvalidArgumentError as exc:
        raise InvalidScheduleError(str(exc), field) from None


def as_overlap(value: str) -> Overlap:
    return cast(Overlap, value)
