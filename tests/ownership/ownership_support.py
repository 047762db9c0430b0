"""Shared helpers for the ownership suite: several engines on one store, a write journal, checks.

Every test here builds its engines on ``storage_factory()`` (the backend registry in
``tests/conftest.py``), one storage handle per engine, all on one ``VirtualClock``: a new
backend joins the suite by registration alone, and no test waits for a timer in real time.

``RecordingStorage`` wraps one engine's handle and logs each write it makes (its conditions,
its ops, whether it committed) in a ``Journal`` shared by all engines of a test, in commit
order. The checks at the bottom replay that journal to prove the two ownership invariants
independently of the engine's own bookkeeping: no owner record is written by an engine that
does not hold the workflow's current epoch, and no step record is written twice.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from weft_serverless import Engine, WorkflowDefinition
from weft_serverless.codec import decode
from weft_serverless.engine.ownership import unpack_epoch
from weft_serverless.storage import keys
from weft_serverless.storage.base import (
    Condition,
    Key,
    Op,
    Put,
    SortRange,
    Storage,
)
from weft_serverless.testing import DEFAULT_START, DelegatingStorage, SimulatedCrash, VirtualClock

Opener = Callable[[], Storage]

T0 = DEFAULT_START
"""Where every ``VirtualClock`` built here starts."""

TTL = 30.0
RENEW = 5.0
GRACE = 2 * RENEW
"""Claim timing used by the suite (the engine defaults) and the takeover grace (2 x renew)."""

# Sort-key prefixes of the records only a workflow's owner writes (each through a fenced commit).
OWNER_RECORD_PREFIXES = (keys.OP_PREFIX, keys.PENDING_PREFIX, keys.ATTEMPT_PREFIX)


# -- the write journal ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Write:
    """One write request as the store saw it."""

    seq: int
    engine: str
    conditions: tuple[Condition, ...]
    ops: tuple[Op, ...]
    committed: bool

    def puts(self, key: Key) -> bool:
        return any(isinstance(op, Put) and op.key == key for op in self.ops)

    def condition_on(self, key: Key) -> Condition | None:
        return next((cond for cond in self.conditions if cond.key == key), None)


@dataclass
class Journal:
    """Every write of every recorded engine, in the order the store applied them.

    Writes are serialised through ``lock`` (held across the inner call), so the order of
    ``writes`` is the commit order; reads are not serialised, so engines still race.
    """

    writes: list[Write] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self,
        engine: str,
        conditions: Sequence[Condition],
        ops: Sequence[Op],
        apply: Callable[[], bool],
    ) -> bool:
        with self.lock:
            ok = apply()
            self.writes.append(Write(len(self.writes), engine, tuple(conditions), tuple(ops), ok))
            return ok

    def by(self, engine: str, *, committed: bool | None = None) -> list[Write]:
        return [
            w
            for w in self.writes
            if w.engine == engine and (committed is None or w.committed == committed)
        ]

    def mark(self) -> int:
        """A position to read ``since`` from later."""
        return len(self.writes)

    def since(self, mark: int) -> list[Write]:
        return self.writes[mark:]


class RecordingStorage(DelegatingStorage):
    """One engine's handle: delegates to ``inner`` and journals every write under ``engine``.

    ``kill()`` stands for the process dying: every later call raises ``SimulatedCrash``, so a
    crashed engine's cleanup (``finally`` blocks, invocation exit) can never write anything.
    """

    def __init__(self, inner: Storage, engine: str, journal: Journal) -> None:
        super().__init__(inner)
        self.engine = engine
        self.journal = journal
        self.dead = False

    def kill(self) -> None:
        self.dead = True

    def _alive(self) -> None:
        if self.dead:
            raise SimulatedCrash(f"engine {self.engine} is dead")

    def _get(self, key: Key) -> bytes | None:
        self._alive()
        return super()._get(key)

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        self._alive()
        return super()._scan(partition, rng, limit, reverse)

    def _batch(self, ops: Sequence[Op]) -> None:
        self._alive()

        def apply() -> bool:
            self.inner.batch(ops)
            return True

        self.journal.record(self.engine, (), ops, apply)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self._alive()
        return self.journal.record(
            self.engine, conditions, ops, lambda: self.inner.conditional_batch(conditions, ops)
        )


# -- engines -------------------------------------------------------------------------------------


def make_engine(
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition],
    engine_id: str,
    clock: Callable[[], float],
    *,
    journal: Journal | None = None,
    ownership: str = "workflow-lease",
    **options: Any,
) -> Engine:
    """A manual engine named ``engine_id`` on its own handle of this test's store."""
    storage = storage_factory()
    if journal is not None:
        storage = RecordingStorage(storage, engine_id, journal)
    options.setdefault("workflow_claim_ttl", TTL)
    options.setdefault("workflow_claim_renew_interval", RENEW)
    return Engine.create(
        storage,
        workflows,
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=clock,
        engine_id=engine_id,
        **options,
    )


def make_engines(
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition],
    names: Sequence[str],
    clock: VirtualClock,
    *,
    journal: Journal | None = None,
    **options: Any,
) -> dict[str, Engine]:
    return {
        name: make_engine(storage_factory, workflows, name, clock, journal=journal, **options)
        for name in names
    }


class SkewedClock:
    """Another engine's clock: a shared ``VirtualClock`` plus a fixed offset (clock skew)."""

    def __init__(self, base: VirtualClock, offset: float) -> None:
        self.base = base
        self.offset = offset

    def __call__(self) -> float:
        return self.base() + self.offset


# -- reading the store directly ------------------------------------------------------------------


def epoch_of(storage: Storage, workflow_id: str) -> int:
    """The stored owner epoch (0 when never claimed)."""
    return unpack_epoch(storage.get(keys.owner_epoch_key(workflow_id)))


def holder_of(storage: Storage, workflow_id: str) -> dict[str, Any] | None:
    data = storage.get(keys.owner_holder_key(workflow_id))
    return None if data is None else dict(decode(data))


def claim_indexed(storage: Storage, workflow_id: str) -> bool:
    return storage.get(keys.claim_index_key(workflow_id)) is not None


def timers_of(storage: Storage, workflow_id: str) -> list[Key]:
    """Keys of the durable timers that would wake ``workflow_id``."""
    partition = keys.timer_partition(keys.shard_of(workflow_id, keys.TIMER_SHARDS))
    return [
        Key(partition, sort)
        for sort, value in storage.scan(partition)
        if decode(value)["wf"] == workflow_id
    ]


def op_slots(storage: Storage, workflow_id: str) -> list[str]:
    """Slots of every stored op record of a workflow (branches included)."""
    prefix = keys.OP_PREFIX
    return [
        sort[len(prefix) :]
        for sort, _ in storage.scan(keys.workflow_partition(workflow_id), prefix)
    ]


def mode_marker(storage: Storage) -> dict[str, Any] | None:
    data = storage.get(keys.meta_key(keys.OWNERSHIP_MODE))
    return None if data is None else dict(decode(data))


def counter(engine: Engine, name: str) -> int:
    return engine.runtime.metrics.counters.get(name, 0)


# -- journal invariants --------------------------------------------------------------------------


def _workflow_of(key: Key) -> str | None:
    if not key.partition.startswith("wf#"):
        return None
    return keys.dec(key.partition[3:])


def _is_owner_record(key: Key) -> bool:
    return _workflow_of(key) is not None and key.sort.startswith(OWNER_RECORD_PREFIXES)


def _is_op_record(key: Key) -> bool:
    return _workflow_of(key) is not None and key.sort.startswith(keys.OP_PREFIX)


def fencing_violations(journal: Journal) -> list[str]:
    """Owner records that landed without their writer holding the workflow's current epoch.

    Replays the committed writes in commit order, tracking each workflow's epoch bytes and the
    engine named by its holder record (None once the holder is deleted: a released or rotated
    epoch has no owner). Every committed put of an owner record (op, pending or attempt record)
    must carry a condition on the workflow's epoch key equal to the epoch current at that point,
    and come from the engine holding that epoch.
    """
    epoch: dict[str, bytes | None] = {}
    owner: dict[str, str | None] = {}
    problems: list[str] = []
    for write in journal.writes:
        if not write.committed:
            continue
        for op in write.ops:
            if not (isinstance(op, Put) and _is_owner_record(op.key)):
                continue
            wf = _workflow_of(op.key)
            assert wf is not None
            fence = write.condition_on(keys.owner_epoch_key(wf))
            current = epoch.get(wf)
            if fence is None or fence.expected is None:
                problems.append(
                    f"write {write.seq} by {write.engine}: {op.key.sort} of {wf} unfenced"
                )
            elif fence.expected != current:
                problems.append(
                    f"write {write.seq} by {write.engine}: {op.key.sort} of {wf} fenced on epoch "
                    f"{unpack_epoch(fence.expected)}, current {unpack_epoch(current)}"
                )
            elif owner.get(wf) != write.engine:
                problems.append(
                    f"write {write.seq} by {write.engine}: {op.key.sort} of {wf} landed while "
                    f"epoch {unpack_epoch(current)} was held by {owner.get(wf)}"
                )
        for op in write.ops:
            wf = _workflow_of(op.key)
            if wf is None:
                continue
            if op.key == keys.owner_epoch_key(wf):
                epoch[wf] = op.value if isinstance(op, Put) else None
            elif op.key == keys.owner_holder_key(wf):
                owner[wf] = str(decode(op.value)["engine_id"]) if isinstance(op, Put) else None
    return problems


def rewritten_op_records(journal: Journal) -> dict[str, int]:
    """Op-record keys put by more than one committed write, with how many times."""
    puts: dict[str, int] = {}
    for write in journal.writes:
        if write.committed:
            for op in write.ops:
                if isinstance(op, Put) and _is_op_record(op.key):
                    name = f"{op.key.partition}/{op.key.sort}"
                    puts[name] = puts.get(name, 0) + 1
    return {name: count for name, count in puts.items() if count > 1}


def refused_step_writes(journal: Journal, engine: str, workflow_id: str) -> list[Write]:
    """Writes by ``engine`` carrying an op record of ``workflow_id`` that the store refused."""
    partition = keys.workflow_partition(workflow_id)
    return [
        w
        for w in journal.by(engine, committed=False)
        if any(
            isinstance(op, Put) and op.key.partition == partition and _is_op_record(op.key)
            for op in w.ops
        )
    ]


def landed_after(journal: Journal, engine: str, mark: int) -> list[Write]:
    """Committed writes by ``engine`` since ``mark``."""
    return [w for w in journal.since(mark) if w.engine == engine and w.committed]


# -- activities and warnings ---------------------------------------------------------------------


class Calls:
    """A thread-safe record of activity executions, as ``(activity, argument)`` pairs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.log: list[tuple[str, Any]] = []

    def add(self, activity: str, arg: Any = None) -> None:
        with self._lock:
            self.log.append((activity, arg))

    def count(self, activity: str) -> int:
        with self._lock:
            return sum(1 for name, _ in self.log if name == activity)

    def recorder(
        self, activity: str, fn: Callable[[Any], Any] = lambda x: x
    ) -> Callable[[Any], Any]:
        """An activity that records its call, then returns ``fn(arg)``."""

        def run(arg: Any = None) -> Any:
            self.add(activity, arg)
            return fn(arg)

        run.__name__ = activity
        return run


@contextmanager
def caught() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning raised inside, duplicates included."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen


def of_category(seen: list[warnings.WarningMessage], category: type[Warning]) -> list[str]:
    return [str(w.message) for w in seen if issubclass(w.category, category)]
