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
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from weft_serverless import Engine, WorkflowDefinition, workflow
from weft_serverless.codec import decode, encode
from weft_serverless.engine.ownership import HEAD_LAYOUT, HOLDER_LAYOUT, unpack_epoch
from weft_serverless.engine.ownership.base import stored_owner
from weft_serverless.engine.persistence.run_head import FENCE_EPOCH, TOMBSTONE, Head
from weft_serverless.engine.persistence.wakeups import WAKE_GRACE
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
from weft_serverless.testing.sim_records import JournalEntry
from weft_serverless.testing.sim_steps import StepLedger, workflow_of

Opener = Callable[[], Storage]

T0 = DEFAULT_START
"""Where every ``VirtualClock`` built here starts."""

TTL = 30.0
RENEW = 5.0
GRACE = 2 * RENEW
"""Claim timing used by the suite (the engine defaults) and the takeover grace (2 x renew)."""
TAKEOVER = max(TTL + GRACE, WAKE_GRACE) + 1
"""Long enough for a dead owner's claim on a run it was driving to be taken over: the claim
expired and its grace passed, and the wake-up the run keeps while drivable is due (on layout
3 that wake is what takes the claim over, ADR 0056)."""

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
    """The stored owner epoch (0 when never claimed): the run's head's when it has one
    (claims move only the head, ADR 0037)."""
    head = storage.get(keys.owner_head_key(workflow_id))
    if head is not None:
        return Head.from_bytes(head).epoch
    return unpack_epoch(storage.get(keys.owner_epoch_key(workflow_id)))


def holder_of(storage: Storage, workflow_id: str) -> dict[str, Any] | None:
    found = stored_owner(storage, workflow_id)
    return None if found is None else dict(found)


def claim_indexed(storage: Storage, workflow_id: str) -> bool:
    return storage.get(keys.claim_index_key(keys.DEFAULT_SHARDS, workflow_id)) is not None


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


def _is_owner_record(key: Key) -> bool:
    return workflow_of(key) is not None and key.sort.startswith(OWNER_RECORD_PREFIXES)


def _is_op_record(key: Key) -> bool:
    return workflow_of(key) is not None and key.sort.startswith(keys.OP_PREFIX)


def fencing_violations(journal: Journal) -> list[str]:
    """Step and owner records that landed without their writer holding the current epoch.

    Replays the committed writes in commit order, tracking each workflow's epoch bytes and the
    engine named by its holder record (None once the holder is deleted: a released or rotated
    epoch has no owner). Every committed put of an owner record (op, pending or attempt record)
    must carry a condition on the workflow's epoch key equal to the epoch current at that point,
    and come from the engine holding that epoch. On a run with a head (ADR 0037) a plain step
    is committed by the head put carrying it inline, which must be on the current epoch by its
    holder; the put that writes such a step out to its own item carries no epoch, and may land
    only as the bytes that step was committed with (or stamped below the run's floor, where no
    reader counts it).
    """
    entries = [JournalEntry(w.engine, w.conditions, w.ops, w.committed) for w in journal.writes]
    return StepLedger(fenced=True).walk(entries).deposed


def step_commits(write: Write) -> list[str]:
    """The step slots ``write`` commits (or tried to): its fenced op-record puts, and a head
    put carrying an inline step (a write-out of a committed step commits nothing)."""
    return list(step_commit_epochs(write))


def step_commit_epochs(write: Write) -> dict[str, int]:
    """``step_commits`` with the epoch each is committed on (``partition/op#slot``)."""
    slots: dict[str, int] = {}
    for op in write.ops:
        wf = workflow_of(op.key)
        if wf is None or not isinstance(op, Put):
            continue
        if op.key == keys.owner_head_key(wf):
            head = Head.from_bytes(op.value)
            if head.slot is not None and is_head_step(write) and not _carried(write, op.key, head):
                slots[f"{op.key.partition}/{keys.OP_PREFIX}{head.slot}"] = head.epoch
        elif _is_op_record(op.key) and not is_write_out(write) and not is_head_step(write):
            epoch = step_fence(write, wf)
            if epoch is not None and not decode(op.value).get(TOMBSTONE):
                slots[f"{op.key.partition}/{op.key.sort}"] = epoch
    return slots


def _carried(write: Write, key: Key, head: Head) -> bool:
    """A head put carrying the step the head it expects already held: a claim, renewal or
    release of layout 3 (a lone head put too, ADR 0056), not a step."""
    expected = write.condition_on(key)
    if expected is None or expected.expected is None:
        return False
    before = Head.from_bytes(expected.expected)
    return (before.slot, before.record) == (head.slot, head.record)


def step_fence(write: Write, workflow_id: str) -> int | None:
    """The epoch a step write of ``workflow_id`` is fenced on: its epoch condition, or, for a
    step committed on the run's head, the epoch of the head it expects (None: unfenced)."""
    fence = write.condition_on(keys.owner_epoch_key(workflow_id))
    if fence is not None:
        return unpack_epoch(fence.expected)
    head = write.condition_on(keys.owner_head_key(workflow_id))
    if head is None or head.expected is None:
        return None
    return Head.from_bytes(head.expected).epoch


def is_head_step(write: Write) -> bool:
    """A plain step's commit on its run's head: the head put alone, or (on a store that
    folds them, ADR 0051) with the write-out of the step before it and the new step's blob
    in the same batch. A claim or a rotation puts other records beside the head."""
    heads = [op for op in write.ops if op.key.sort == keys.OWNER_HEAD]
    return len(heads) == 1 and all(op in heads or folded_write(op) for op in write.ops)


def folded_write(op: Op) -> bool:
    """A write a step's head batch may carry beside the head: a write-out of a committed
    step (stamped with its epoch) or a blob."""
    if not isinstance(op, Put) or workflow_of(op.key) is None:
        return False
    if op.key.sort.startswith(keys.BLOB_PREFIX):
        return True
    return _is_op_record(op.key) and FENCE_EPOCH in decode(op.value)


def is_write_out(write: Write) -> bool:
    """A lone unfenced put of a step committed inline on a head (it commits nothing)."""
    return (
        len(write.ops) == 1
        and isinstance(write.ops[0], Put)
        and _is_op_record(write.ops[0].key)
        and all(c.key == write.ops[0].key for c in write.conditions)
        and FENCE_EPOCH in decode(write.ops[0].value)
    )


def rewritten_op_records(journal: Journal) -> dict[str, int]:
    """Steps committed by more than one committed write, with how many times."""
    puts: dict[str, int] = {}
    for write in journal.writes:
        if write.committed:
            for name in step_commits(write):
                puts[name] = puts.get(name, 0) + 1
    return {name: count for name, count in puts.items() if count > 1}


def refused_step_writes(journal: Journal, engine: str, workflow_id: str) -> list[Write]:
    """Writes by ``engine`` committing a step of ``workflow_id`` that the store refused."""
    partition = keys.workflow_partition(workflow_id)
    return [
        w
        for w in journal.by(engine, committed=False)
        if any(name.startswith(partition + "/") for name in step_commits(w))
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


def step_wait_step(calls: Calls, *, sleep: float | None = None) -> dict[str, WorkflowDefinition]:
    """The run most claim tests drive, as workflow type ``flow``: step ``a``, a sleep of
    ``sleep`` seconds (none when None), a wait for signal ``go``, step ``b``."""

    def flow(ctx: Any, x: int) -> Generator[Any, Any, Any]:
        y = yield ctx.run("a", x)
        if sleep is not None:
            yield ctx.sleep(sleep)
        g = yield ctx.wait_for_signal("go")
        z = yield ctx.run("b", y + g)
        return z

    return {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda x: x + 1), b=calls.recorder("b"))
        .execute(flow)
    }


@contextmanager
def caught() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning raised inside, duplicates included."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield seen


def of_category(seen: list[warnings.WarningMessage], category: type[Warning]) -> list[str]:
    return [str(w.message) for w in seen if issubclass(w.category, category)]


def layout_2(open_storage: Opener) -> Opener:
    """Open the test's store as a release of layout 2 set it up (``workflow-lease@2``: a
    holder item and a claims-index entry per claim, ADR 0037), so its runs keep that layout
    under this release (ADR 0056). Tests that read those items name this layout."""
    return marked_as(open_storage, HEAD_LAYOUT)


def layout_3(open_storage: Opener) -> Opener:
    """Open the test's store as a release of layout 3 set it up (``workflow-lease@3``: the
    holder in the head, a park written as a pending item in a transaction, ADR 0056)."""
    return marked_as(open_storage, HOLDER_LAYOUT)


def marked_as(open_storage: Opener, layout: str) -> Opener:
    """Open the test's store with its ownership marker set to ``layout`` if none is."""
    marked: list[bool] = []

    def open_marked() -> Storage:
        handle = open_storage()
        if not marked:
            key = keys.meta_key(keys.OWNERSHIP_MODE)
            if handle.get(key) is None:
                handle.put(key, encode({"mode": layout, "established_at": DEFAULT_START}))
            marked.append(True)
        return handle

    return open_marked


def stepping(calls: Calls) -> dict[str, Any]:
    """A step, a sleep, a step, a signal wait: the fired sleep's resumed code runs a step
    before its next wait, so the fire claims the run before that step's side effect (ADR
    0059). Started with 1 and signalled 5, it returns 7."""

    def flow(ctx: Any, x: int) -> Iterator[Any]:
        y = yield ctx.run("a", x)
        yield ctx.sleep(10)
        z = yield ctx.run("b", y)
        g = yield ctx.wait_for_signal("go")
        return z + g

    return {
        "flow": workflow("flow")
        .activities(a=calls.recorder("a", lambda x: x + 1), b=calls.recorder("b"))
        .execute(flow)
    }
