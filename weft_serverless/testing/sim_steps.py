"""The step ledger the simulator's journal checks share: which writes commit a step.

A step is committed by a batch that puts its ``op#`` record fenced on the owner epoch, or,
on a run with a head (ADR 0037), by a head put that carries a new inline step. A write-out
of an inline step puts a record committed already, alone or in the head put's batch (ADR
0051); a tombstone forgets one. The ledger walks every landed write in order and files what
breaks the rules: a step committed twice, a commit by an engine that did not hold the run's
epoch, or an ``op#`` item that lands and that a reader would count although no commit made
it (the one kind of write a deposed owner can still land must be one no reader counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from weft_serverless.codec import decode
from weft_serverless.engine.ownership import unpack_epoch
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.engine.persistence.run_head import FENCE_EPOCH, TOMBSTONE, Head, is_void
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key, Op, Put
from weft_serverless.testing.sim_records import JournalEntry

OWNER_PREFIXES = (keys.OP_PREFIX, keys.PENDING_PREFIX, keys.ATTEMPT_PREFIX)


def workflow_of(key: Key) -> str | None:
    if key.partition.startswith("wf#"):
        return keys.dec(key.partition[3:])
    return None


@dataclass
class StepLedger:
    """Replays the journal; ``twice`` and ``deposed`` hold the problems, one line each."""

    fenced: bool
    live: dict[Key, bytes] = field(default_factory=dict)
    epoch: dict[str, bytes | None] = field(default_factory=dict)
    owner: dict[str, str | None] = field(default_factory=dict)
    head: dict[str, Head | None] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)  # the run's first step slot
    held: set[str] = field(default_factory=set)  # runs whose head has carried a holder
    twice: list[str] = field(default_factory=list)
    deposed: list[str] = field(default_factory=list)

    def walk(self, journal: Sequence[JournalEntry]) -> StepLedger:
        for seq, entry in enumerate(journal):
            if entry.committed:
                self._entry(seq, entry)
        return self

    def _entry(self, seq: int, entry: JournalEntry) -> None:
        heads: dict[str, Head | None] = {}
        for op in entry.ops:
            wf = workflow_of(op.key)
            if wf is None:
                continue
            where = f"write {seq} by {entry.engine}: {op.key.sort} of {wf}"
            if op.key == keys.owner_head_key(wf):
                heads[wf] = self._head(where, wf, op, entry)
            elif op.key.sort.startswith(keys.OP_PREFIX):
                self._op(where, wf, op, entry)
            elif isinstance(op, Put) and op.key.sort.startswith(OWNER_PREFIXES):
                self._check_fence(where, wf, entry)
        self.head.update(heads)  # after the checks: a batch is fenced on what it found
        for op in entry.ops:
            wf = workflow_of(op.key)
            if wf is None:
                continue
            if op.key == keys.owner_epoch_key(wf):
                self.epoch[wf] = op.value if isinstance(op, Put) else None
            elif op.key == keys.owner_holder_key(wf):
                self.owner[wf] = str(decode(op.value)["engine_id"]) if isinstance(op, Put) else None
            elif op.key == keys.owner_head_key(wf) and isinstance(op, Put):
                self._head_holder(wf, Head.from_bytes(op.value))
            elif op.key.sort == keys.STATE and isinstance(op, Put):
                self.first[wf] = WorkflowState.from_bytes(op.value).first_step

    def _head_holder(self, wf: str, head: Head) -> None:
        """Layout 3 carries the holder in the head: a head put with a holder claims the run
        (or keeps it), one without releases it if the head held it before. A layout-2 head
        never holds one, so its holder item alone says who owns the run."""
        if head.holder is not None:
            self.owner[wf] = head.holder.engine_id
            self.held.add(wf)
        elif wf in self.held:
            self.owner[wf] = None

    def current(self, wf: str) -> int:
        """The run's epoch: its head's when it has one (claims move only the head)."""
        head = self.head.get(wf)
        return head.epoch if head is not None else unpack_epoch(self.epoch.get(wf))

    def _head(self, where: str, wf: str, op: Op, entry: JournalEntry) -> Head | None:
        before = self.head.get(wf)
        after = Head.from_bytes(op.value) if isinstance(op, Put) else None
        if after is None or after.slot is None or after.record is None:
            return after
        if before is not None and (before.slot, before.record) == (after.slot, after.record):
            return after  # carried over by a claim or a rotation: no new step
        key = keys.op_key(wf, after.slot)
        if key in self.live:
            self.twice.append(f"{where}: step {key.sort} committed twice")
        self.live[key] = after.record
        if self.fenced and _unclaimed(wf, before, after, entry):
            return after  # a drive that claimed nothing, on the free head as it stood
        if self.fenced and (after.epoch != self.current(wf) or self.owner.get(wf) != entry.engine):
            self.deposed.append(
                f"{where}: head step on epoch {after.epoch}, current "
                f"{self.current(wf)} held by {self.owner.get(wf)}"
            )
        return after

    def _op(self, where: str, wf: str, op: Op, entry: JournalEntry) -> None:
        if not isinstance(op, Put):
            self.live.pop(op.key, None)
            return
        record = decode(op.value)
        if isinstance(record, dict) and record.get(TOMBSTONE):
            self.live.pop(op.key, None)  # forgotten by a retry, in its fenced batch
            return
        fences = (keys.owner_epoch_key(wf), keys.owner_head_key(wf))
        stamped = isinstance(record, dict) and FENCE_EPOCH in record
        if stamped and not any(c.key in fences for c in entry.conditions):
            self._write_out(where, wf, op, record)
            return
        if stamped and any(o.key == keys.owner_head_key(wf) for o in entry.ops):
            # in the batch of a head put (a store that folds the write-out into the step's
            # commit, ADR 0051): a write-out all the same, which commits nothing
            self._write_out(where, wf, op, record)
            return
        if op.key in self.live:
            self.twice.append(f"{where}: step {op.key.sort} committed twice")
        self.live[op.key] = op.value
        self._check_fence(where, wf, entry)

    def _write_out(self, where: str, wf: str, op: Put, record: object) -> None:
        """An unfenced put of a step: harmless only as the committed step's own bytes, or
        as a record no reader counts (stamped below the run's floor, or at a slot below the
        run's first step, set aside as an earlier run's after a ``continue_as_new``)."""
        if self.live.get(op.key) == op.value:
            return
        head = self.head.get(wf)
        if head is None:
            return  # no run holds the id (purged): the next run's floor is above this stamp
        if isinstance(record, dict) and is_void(OpRecord.from_map(record), head.floor):
            return
        slot = op.key.sort[len(keys.OP_PREFIX) :]
        if keys.counter_value(keys.top_slot(slot)) < self.first.get(wf, 0):
            return  # below the run's first step: an earlier run's, set aside (continue_as_new)
        self.deposed.append(f"{where}: written out but never committed")

    def _check_fence(self, where: str, wf: str, entry: JournalEntry) -> None:
        if not self.fenced:
            return
        epoch = next((c for c in entry.conditions if c.key == keys.owner_epoch_key(wf)), None)
        head = next((c for c in entry.conditions if c.key == keys.owner_head_key(wf)), None)
        if head is not None and head.expected is not None:
            fenced_on: int | None = Head.from_bytes(head.expected).epoch
        elif epoch is not None and epoch.expected is not None and self.head.get(wf) is None:
            fenced_on = unpack_epoch(epoch.expected)
        else:
            fenced_on = None
        if fenced_on is None:
            self.deposed.append(f"{where} landed unfenced")
        elif fenced_on != self.current(wf):
            self.deposed.append(f"{where} fenced on epoch {fenced_on}, current {self.current(wf)}")
        elif self.owner.get(wf) != entry.engine:
            self.deposed.append(f"{where} landed while {self.owner.get(wf)} held the epoch")


def _unclaimed(wf: str, before: Head | None, after: Head, entry: JournalEntry) -> bool:
    """A step committed by a drive that wrote no claim (ADR 0059): a head put on the same
    epoch, naming no holder, on condition that the head is exactly the current one and that
    it names no holder either. Every claim moves the epoch and every other commit is made on
    a head naming its holder, so such a put lands only where nobody wrote since the read."""
    if before is None or before.holder is not None or after.holder is not None:
        return False
    if after.epoch != before.epoch:
        return False
    fence = next((c for c in entry.conditions if c.key == keys.owner_head_key(wf)), None)
    return (
        fence is not None
        and fence.expected is not None
        and (Head.from_bytes(fence.expected) == before)
    )
