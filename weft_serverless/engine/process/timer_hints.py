"""Timer hints: a message per timer armed soon, so a worker fires it at due (ADR 0054).

The timer record stays the truth; a hint only says "look at this key around then". A hint
lost, sent twice, early or out of order changes nothing: the firing side reads the record
first, and the maintenance sweep still fires every timer.

Hints are collected where every write lands (``runs/commit.py`` reports each committed
batch here), so every timer kind is hinted from one place. A hint is queued only after the
write that armed its timer committed, dropped again if a later committed write in the same
scope deleted that timer (a start's wake-up that its inline drive disarmed costs nothing),
and sent in batches of ``BATCH`` when the outermost scope (an engine call, an invocation)
ends. Outside any scope a committed timer is sent at once. A send that fails is logged and
counted, never raised: the sweep fires the timer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from weft_serverless.engine.process.telemetry import Metrics, logger
from weft_serverless.storage import keys
from weft_serverless.storage.base import Delete, Key, Op, Put

BATCH = 10
"""Hints per ``send`` call: what one SQS ``SendMessageBatch`` takes."""


@dataclass(frozen=True, slots=True)
class TimerHint:
    """One armed timer: the id it names, its key (``partition``, ``sort``) and due time."""

    workflow_id: str
    partition: str
    sort: str
    due: float

    @property
    def key(self) -> Key:
        return Key(self.partition, self.sort)

    @classmethod
    def of(cls, key: Key) -> TimerHint:
        return cls(
            keys.timer_owner_of(key.sort), key.partition, key.sort, keys.timer_due_of(key.sort)
        )


@runtime_checkable
class TimerHints(Protocol):
    """Where hints go. ``horizon``: the longest delay the port can carry (seconds); a timer
    due later is hinted by the sweep pass that sees it come within reach."""

    horizon: float

    def send(self, hints: Sequence[TimerHint]) -> None: ...


class ArmedTimers:
    """The earliest due time of the timers committed while watched (``watch_armed``).

    A maintenance pass watches its drives so it knows its ``next_due`` without reading every
    timer shard again after firing: what its probes saw not yet due, what it left stored, and
    what its own drives armed. Drives may run on several threads: the minimum is locked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.earliest: float | None = None

    def note(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if isinstance(op, Put) and keys.is_timer_partition(op.key.partition):
                due = keys.timer_due_of(op.key.sort)
                with self._lock:
                    if self.earliest is None or due < self.earliest:
                        self.earliest = due


_ARMED: ContextVar[ArmedTimers | None] = ContextVar("weft_armed_timers", default=None)


@contextmanager
def watch_armed() -> Iterator[ArmedTimers]:
    """Note every timer committed in this context (and the contexts copied from it, as a
    parallel pass's threads are) until it ends."""
    armed = ArmedTimers()
    token = _ARMED.set(armed)
    try:
        yield armed
    finally:
        _ARMED.reset(token)


class HintOutbox:
    """The hints of committed writes, held per thread until the outermost scope ends."""

    def __init__(
        self, port: TimerHints | None, clock: Callable[[], float], metrics: Metrics
    ) -> None:
        self.port = port
        self._clock = clock
        self._metrics = metrics
        self._local = threading.local()

    def _pending(self) -> dict[Key, TimerHint]:
        pending: dict[Key, TimerHint] | None = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = {}
        return pending

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Hold hints until the outermost scope on this thread ends, then send them."""
        if self.port is None:
            yield
            return
        depth: int = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self.flush()

    def committed(self, ops: Iterable[Op]) -> None:
        """Note the timers a committed batch armed (within the horizon) or deleted."""
        armed = _ARMED.get()
        if armed is not None:
            armed.note(ops)
        port = self.port
        if port is None:
            return
        pending: dict[Key, TimerHint] | None = None
        reach = 0.0
        for op in ops:
            if not keys.is_timer_partition(op.key.partition):
                continue
            if pending is None:
                pending = self._pending()
                reach = self._clock() + port.horizon
            if isinstance(op, Put):
                hint = TimerHint.of(op.key)
                if hint.due <= reach:
                    pending[op.key] = hint
            elif isinstance(op, Delete):
                pending.pop(op.key, None)
        if pending and not getattr(self._local, "depth", 0):
            self.flush()

    def deleted(self, doomed: Iterable[Key]) -> None:
        """Timers deleted outside a batch (a plain ``delete_many``): no hint for them."""
        if self.port is not None:
            self.committed(Delete(key) for key in doomed)

    def flush(self) -> None:
        """Send what this thread holds, ``BATCH`` at a time; a failed send is counted."""
        port = self.port
        pending: dict[Key, TimerHint] | None = getattr(self._local, "pending", None)
        if port is None or not pending:
            return
        hints = sorted(pending.values(), key=lambda hint: hint.due)
        pending.clear()
        send(port, hints, self._metrics)


def send(port: TimerHints, hints: Sequence[TimerHint], metrics: Metrics) -> None:
    """Send ``hints`` through ``port`` in batches; failures are logged and counted only."""
    for start in range(0, len(hints), BATCH):
        batch = hints[start : start + BATCH]
        try:
            port.send(batch)
        except Exception as exc:  # the sweep fires the timer: a hint is never worth a failure
            metrics.incr("timer_hints_failed", len(batch))
            logger.warning("%d timer hints not sent (the sweep fires them): %s", len(batch), exc)
        else:
            metrics.incr("timer_hints_sent", len(batch))
