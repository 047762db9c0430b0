"""Firing timer hints, and the sweep's re-hint of timers that come within a hint's reach.

A hint names a timer key (ADR 0054). Firing one reads that key, strongly consistent: absent,
it fired already; not due yet, it is waited for (due within ``SOON`` seconds) or handed back
to be sent again with the delay left; due, its run's hinted timers fire through the same
``maintenance.fire_run_timers`` the sweep uses, so a hint racing the sweep or another hint
does the work once (drives and deletes are fenced; a stale wake finds nothing to do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from weft_serverless.codec import decode_record
from weft_serverless.engine.drive.dispatch import Dispatcher
from weft_serverless.engine.maintenance import KEPT, fire_run_timers
from weft_serverless.engine.persistence.stored_records import TimerRecord
from weft_serverless.engine.process.telemetry import skip_unsupported
from weft_serverless.engine.process.timer_hints import TimerHint, send
from weft_serverless.engine.runtime import Budget, Runtime
from weft_serverless.errors import UnsupportedSchemaVersionError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key
from weft_serverless.storage.keys.shards import EVERY_SHARD, Share

SOON = 1.0
"""A hint whose timer falls due within this many seconds is waited for, not sent again."""
REHINT_WINDOW = 120.0
"""How far before its hint horizon the sweep hints a timer: twice the construct's one-minute
maintenance rate, so each such timer is seen by at least one pass before it is out of reach."""


@dataclass(slots=True)
class TimerHintReport:
    """What firing a set of hints did.

    ``fired``: the hints whose timers fired here. ``absent``: no timer under the key (fired
    already, or deleted by the step it guarded). ``resend``: hints of timers not due yet,
    each with the seconds left (send it again with that delay). ``kept``: timers left stored
    for a later pass (their run is owned elsewhere, busy here, or failed to fire).
    """

    fired: list[TimerHint] = field(default_factory=list)
    absent: list[TimerHint] = field(default_factory=list)
    resend: list[tuple[TimerHint, float]] = field(default_factory=list)
    kept: list[TimerHint] = field(default_factory=list)
    max_lateness: float = 0.0


@dataclass(slots=True)
class _Stored:
    hint: TimerHint
    kind: str

    @property
    def due(self) -> float:
        return self.hint.due


def fire_hints(
    rt: Runtime,
    dispatcher: Dispatcher,
    hints: Sequence[TimerHint],
    wait: Callable[[float], None],
) -> TimerHintReport:
    """Fire the timers ``hints`` name that are due (see the module docstring)."""
    report = TimerHintReport()
    stored: list[_Stored] = []
    for hint in {hint.key: hint for hint in hints}.values():
        found = _read(rt, hint, report)
        if found is not None:
            stored.append(found)
    stored.sort(key=lambda item: item.due)
    done: set[Key] = set()
    for item in stored:
        if item.hint.key in done:
            continue
        left = _left(rt, item.hint)
        if left > SOON:
            report.resend.append((item.hint, left))
            done.add(item.hint.key)
            continue
        if left > 0:
            wait(left)
            if _left(rt, item.hint) > 0:  # the clock did not reach it: send it again
                report.resend.append((item.hint, 0.0))
                done.add(item.hint.key)
                continue
        # Every hinted timer of this run that is due now fires in one drive, as the sweep's.
        group = [
            other
            for other in stored
            if other.hint.workflow_id == item.hint.workflow_id
            and other.hint.key not in done
            and _left(rt, other.hint) <= 0
        ]
        done.update(other.hint.key for other in group)
        _fire(rt, dispatcher, group, report)
    return report


def _read(rt: Runtime, hint: TimerHint, report: TimerHintReport) -> _Stored | None:
    raw = rt.storage.get(hint.key)
    if raw is None:
        report.absent.append(hint)
        return None
    try:
        timer = TimerRecord.from_map(decode_record(raw, f"timer {hint.sort!r}"))
    except UnsupportedSchemaVersionError as exc:
        skip_unsupported(rt.metrics, exc)
        report.kept.append(hint)
        return None
    # The record is the truth: the key says when it is due and whose it is.
    return _Stored(TimerHint.of(hint.key), timer.kind)


def _left(rt: Runtime, hint: TimerHint) -> float:
    """Seconds until the sweep would call ``hint``'s timer due (0: due now)."""
    cutoff = rt.clock_guard.timer_cutoff(rt.now())
    if hint.sort < keys.timer_due_bound(cutoff):
        return 0.0
    return max(hint.due - cutoff, 0.001)


def _fire(
    rt: Runtime, dispatcher: Dispatcher, group: list[_Stored], report: TimerHintReport
) -> None:
    workflow_id = group[0].hint.workflow_id
    timers = [(item.hint.key, item.due, item.kind) for item in group]
    outcome = fire_run_timers(rt, dispatcher, workflow_id, timers, Budget())
    if outcome in KEPT:
        report.kept += [item.hint for item in group]
        return
    now = rt.now()
    for item in group:
        lateness = max(0.0, now - item.due)
        report.fired.append(item.hint)
        report.max_lateness = max(report.max_lateness, lateness)
        rt.metrics.incr("timer_hints_fired")
        rt.metrics.incr("timer_hint_lateness_ms_total", round(lateness * 1000))


def rehint(
    rt: Runtime, now: float, hinted_until: float | None = None, share: Share = EVERY_SHARD
) -> tuple[int, float]:
    """Hint the timers about to come within the port's reach: per timer shard of ``share``
    (a maintenance worker re-hints the shards it fires, ADR 0055), one read of
    those due in ``[now + horizon - REHINT_WINDOW, now + horizon)``, starting no earlier
    than ``hinted_until`` (where this process's previous pass stopped, so a tick loop does
    not hint a timer at every tick). Returns how many, and where this pass stopped. A timer
    hinted twice (by its arming and by a pass, or by two containers' passes) fires once."""
    port = rt.hints.port
    if port is None:
        return 0, now
    reach = now + port.horizon
    start = now + max(0.0, port.horizon - REHINT_WINDOW)
    if hinted_until is not None:
        start = min(max(start, hinted_until), reach)
    low = keys.timer_due_bound(start)
    high = keys.timer_due_bound(reach)
    hints = [
        TimerHint.of(Key(partition, sort))
        for partition in map(keys.timer_partition, share.of(rt.shards_to_read.timers))
        for sort, _ in rt.storage.scan(partition, gte=low, lt=high)
    ]
    send(port, hints, rt.metrics)
    return len(hints), reach
