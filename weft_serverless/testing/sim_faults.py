"""Seeded faults for the simulation: a storage handle that fails on schedule, and the table.

Every engine incarnation writes through its own ``FaultyStorage``. The simulator counts
events (storage writes, activity executions, invocation ends) across all engines; a fault plan
entry ``[counter, n, kind]`` fires ``kind`` at the ``n``-th event of that counter. ``FAULTS``
maps each kind to its counter and weight; adding a fault is one entry (plus, for a new
storage behaviour, one branch in ``FaultyStorage._write``).

Storage faults stand for what reaches the engine after the adapter's own retries: a busy or
throttled store that applied nothing, a 500 whose write did or did not land (ambiguous), and
the process dying right before or after a write (no cleanup: the handle refuses everything).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from weft_serverless.errors import StorageRetriesExhaustedError, StorageUnavailableError
from weft_serverless.storage import keys
from weft_serverless.storage.base import (
    Condition,
    Key,
    Op,
    SortRange,
    Storage,
)
from weft_serverless.testing import DelegatingStorage, SimulatedCrash

Counter = Literal["read", "write", "start", "shared", "activity", "invocation-end"]


@dataclass(frozen=True)
class FaultSpec:
    """A fault kind: which event counter triggers it, how often the generator draws it, and
    whether it is switched on (``enabled=False`` keeps a known-open defect's fault out of
    generated plans until its fix lands; ``--faults`` can still name it)."""

    counter: Counter
    weight: float
    enabled: bool = True


TRANSIENT_FAULTS_ON = True
"""Transient storage errors reaching the engine (``busy``, ``throttled``, ``server-error-*``,
``read-busy``) in generated plans: on since every failed drive leaves a durable wake-up
(DESIGN.md liveness); turn off only to isolate another finding."""

PREEMPT_AFTER_WRITE_ON = True
"""Other engines acting right after a write landed (a child start, say): the window in which
a drive queued behind another one runs."""

FAULTS: dict[str, FaultSpec] = {
    # The process dies just before / just after a storage write (the write did not / did land).
    "crash-before-write": FaultSpec("write", 1.0),
    "crash-after-write": FaultSpec("write", 1.0),
    # Transient errors that reach the engine: nothing applied (busy, throttled) ...
    "busy": FaultSpec("write", 0.6, TRANSIENT_FAULTS_ON),
    "throttled": FaultSpec("write", 0.6, TRANSIENT_FAULTS_ON),
    "read-busy": FaultSpec("read", 0.3, TRANSIENT_FAULTS_ON),
    # ... and ambiguous 500s whose write did not or did land.
    "server-error-lost": FaultSpec("write", 0.4, TRANSIENT_FAULTS_ON),
    "server-error-landed": FaultSpec("write", 0.4, TRANSIENT_FAULTS_ON),
    # Another engine (or the operator) acts right before this storage call: the interleaving
    # a real concurrent deployment allows between any two requests of one engine.
    "preempt-read": FaultSpec("read", 1.0),
    "preempt-write": FaultSpec("write", 1.0),
    "preempt-after-write": FaultSpec("write", 1.0, PREEMPT_AFTER_WRITE_ON),
    # The engine hangs right before a write that starts a run (a start, a child start) for
    # longer than the wake-up grace of the run it drives: another engine's maintenance drives
    # that run meanwhile (in mode none nothing fences the two drives, so both start the same
    # child). Starts have a counter of their own: among all writes they are too rare for a
    # fault to land on one often enough.
    "stall-before-start": FaultSpec("start", 1.0),
    # Another engine acts on a record engines share right before a call touches it: a
    # schedule (a pause landing while a fire is written), a bulk operation (a second worker
    # on its page), a run's update (a cancel racing it). Rare among calls: a counter of its
    # own, hit more often.
    "preempt-shared": FaultSpec("shared", 1.0),
    # The engine dies inside an activity, or stalls there past the claim TTL while others run.
    "crash-in-activity": FaultSpec("activity", 0.8),
    "stall-in-activity": FaultSpec("activity", 0.8),
    # The invocation's end is lost: the process is frozen for good before it releases claims.
    "lost-invocation-end": FaultSpec("invocation-end", 0.8),
}
"""Every fault kind the simulator can inject: name -> spec."""

TRANSIENT = frozenset(
    {"busy", "throttled", "read-busy", "server-error-lost", "server-error-landed"}
)


def enabled_faults(names: Sequence[str] | None = None) -> list[str]:
    """The kinds a generated plan draws from: ``names`` if given, else every enabled kind."""
    if names is not None:
        unknown = sorted(set(names) - FAULTS.keys())
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; known: {sorted(FAULTS)}")
        return [name for name in FAULTS if name in names]  # table order: plans replay
    return [name for name, spec in FAULTS.items() if spec.enabled]


RATE_SCALE: dict[Counter, float] = {"start": 4.0, "shared": 8.0}
"""Counters hit more often than the plan's rate: a schedule makes only a few starts, and the
races a stall before one opens (two engines starting one child) need it to land on one."""


def random_plan(
    rng: random.Random, kinds: Sequence[str], rate: float, events: dict[Counter, int]
) -> list[list[Any]]:
    """Draw a fault plan: about ``rate`` x ``events[counter]`` faults (times the counter's
    ``RATE_SCALE``), spread over each."""
    plan: list[list[Any]] = []
    for counter, total in events.items():
        candidates = [k for k in kinds if FAULTS[k].counter == counter]
        if not candidates or total <= 0:
            continue
        weights = [FAULTS[k].weight for k in candidates]
        count = min(total, round(total * rate * RATE_SCALE.get(counter, 1.0)))
        for n in sorted(rng.sample(range(1, total + 1), k=count)):
            plan.append([counter, n, rng.choices(candidates, weights)[0]])
    return plan


class FaultyStorage(DelegatingStorage):
    """One engine incarnation's handle on the shared store; fails when the plan says so.

    ``fault_for(counter, partition)`` (the simulator) answers which fault, if any, hits the
    next read or write of ``partition``; the simulator carries out preemptions itself, before
    it answers, aimed at the workflow the call is about.
    After ``kill()`` every call raises ``SimulatedCrash``: a dead process writes nothing more.
    """

    def __init__(
        self,
        inner: Storage,
        fault_for: Callable[[Counter, str], str | None],
        journal: Callable[[Sequence[Condition], Sequence[Op], bool], None],
        after_write: Callable[[str], None] | None = None,
        history_read: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(inner)
        self.fault_for = fault_for
        self.journal = journal
        self.after_write = after_write
        self.history_read = history_read  # told of every whole-partition read (a drive starts)
        self.dead = False

    def kill(self) -> None:
        self.dead = True

    def _alive(self) -> None:
        if self.dead:
            raise SimulatedCrash("this engine is dead")

    def _read(self, partition: str) -> None:
        self._alive()
        if partition in SHARED_PARTITIONS:
            self.fault_for("shared", partition)  # carried out by the simulator
            self._alive()
        if self.fault_for("read", partition) == "read-busy":
            raise StorageUnavailableError("injected read-busy: the store did not answer")
        self._alive()  # a preemption may have killed this engine

    def _get(self, key: Key) -> bytes | None:
        self._read(key.partition)
        return super()._get(key)

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        self._read(partition)
        if rng.low is None and rng.high is None and self.history_read is not None:
            self.history_read(partition)
        rows = super()._scan(partition, rng, limit, reverse)
        for row in rows:
            self._alive()
            yield row

    def _write(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self._alive()
        partition = ops[0].key.partition if ops else ""
        if _starts_a_run(conditions, ops):
            self.fault_for("start", partition)  # carried out by the simulator, as a preemption
            self._alive()
        if partition in SHARED_PARTITIONS or _applies_an_update(ops):
            self.fault_for("shared", partition)
            self._alive()
        fault = self.fault_for("write", partition)
        self._alive()
        if fault == "crash-before-write":
            self.kill()
            raise SimulatedCrash("crash before a write")
        if fault in ("busy", "server-error-lost"):
            raise StorageUnavailableError(f"injected {fault}: nothing was applied")
        if fault == "throttled":
            raise StorageRetriesExhaustedError("write", 5, False, "injected throttling")
        if conditions:
            ok = self.inner.conditional_batch(conditions, ops)
        else:
            self.inner.batch(ops)
            ok = True
        self.journal(conditions, ops, ok)
        if fault == "preempt-after-write" and self.after_write is not None:
            self.after_write(partition)
        if fault == "crash-after-write":
            self.kill()
            raise SimulatedCrash("crash after a write")
        if fault == "server-error-landed":
            raise StorageRetriesExhaustedError("write", 5, True, "injected 500 after applying")
        return ok

    def _batch(self, ops: Sequence[Op]) -> None:
        self._write((), ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        return self._write(conditions, ops)


SHARED_PARTITIONS = frozenset({keys.SCHEDULE_PARTITION, keys.BULK_PARTITION})


def _applies_an_update(ops: Sequence[Op]) -> bool:
    return any(op.key.sort.startswith(keys.UPDATE_APPLIED_PREFIX) for op in ops)


def _starts_a_run(conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
    """A write that creates a run's state: it requires that state to be absent."""
    return any(c.expected is None and c.key.sort == keys.STATE for c in conditions)
