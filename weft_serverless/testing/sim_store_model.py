"""Invariants checked after every write: the journal replayed onto a model of the store.

``StoreModel`` applies each landed write of the journal, in order, to a copy of the store,
and after each one checks what must hold between any two writes, not only at the end: a
leak that a later maintenance pass heals (a finished run's wake-up or claim-index entry) is
caught at the write that left it. Each check files lines under its invariant's name in
``problems``; ``sim_invariants.INVARIANTS`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.engine.persistence.records import FAILED, PENDING, TERMINAL, WorkflowState
from weft_serverless.engine.persistence.run_head import FENCE_EPOCH, TOMBSTONE, Head, holder_record
from weft_serverless.engine.persistence.stored_records import (
    AttemptRecord,
    OpRecord,
    PendingRecord,
)
from weft_serverless.engine.runs import concurrency
from weft_serverless.engine.runs.concurrency import is_queued
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key, Put
from weft_serverless.testing.sim_records import JournalEntry
from weft_serverless.testing.sim_store_schedules import check_schedules

FROZEN_FAMILIES = (
    keys.OP_PREFIX,
    keys.PENDING_PREFIX,
    keys.ATTEMPT_PREFIX,
    keys.UPDATE_APPLIED_PREFIX,
)
"""Records of a run's progress: none lands on a run that stays finished."""
BULK_SIGNAL = "bulk-"
HOLDERS = frozenset({keys.OWNER_HOLDER, keys.LEASE_HOLDER})
CONDITIONAL_RECORDS = {
    keys.SCHEDULE_PARTITION: "schedule-writes-are-conditional",
    keys.BULK_PARTITION: "bulk-writes-are-conditional",
}
EVENT_FAMILIES = (keys.SIGNAL_PREFIX, keys.CHILD_PREFIX, keys.ASYNC_RESULT_PREFIX)
"""Records of events a parked run waits for."""


def _written_out_of(wf: str, entry: JournalEntry) -> bool:
    """Whether a stamped step record in ``entry`` is a write-out of a head's step (not
    fenced on the run's head or epoch, or in the batch of a head put, as ``sim_steps``
    tells them apart), which commits nothing."""
    fences = (keys.owner_epoch_key(wf), keys.owner_head_key(wf))
    fenced = any(condition.key in fences for condition in entry.conditions)
    return not fenced or any(op.key == keys.owner_head_key(wf) for op in entry.ops)


@dataclass
class StoreModel:
    """The store as the journal built it, and what every write broke (by invariant)."""

    ownership: str
    rejecting: frozenset[str] = frozenset()  # workflow types whose limit rejects, never queues
    store: dict[Key, bytes] = field(default_factory=dict)
    states: dict[str, WorkflowState] = field(default_factory=dict)
    schedule_runs: dict[str, list[str]] = field(default_factory=dict)
    acted: dict[Key, int] = field(default_factory=dict)  # bulk signal ids and retry markers
    concurrency: dict[str, dict[Key, str]] = field(default_factory=dict)  # partition: item: run
    wake_timers: dict[str, set[Key]] = field(default_factory=dict)  # run: its wake timers
    moved: dict[str, set[Key]] = field(default_factory=dict)  # run or schedule: moved timers
    problems: dict[str, list[str]] = field(default_factory=dict)

    def walk(self, journal: Sequence[JournalEntry]) -> StoreModel:
        for seq, entry in enumerate(journal):
            if entry.committed:
                self._entry(f"write {seq} by {entry.engine} ({entry.action})", entry)
        return self

    def file(self, invariant: str, line: str) -> None:
        self.problems.setdefault(invariant, []).append(line)

    def _entry(self, where: str, entry: JournalEntry) -> None:
        before = {op.key: self.store.get(op.key) for op in entry.ops}
        states_before = {wf: self.states.get(wf) for wf in self._runs_touched(entry)}
        self._lease_fence(where, entry)
        self._holders_conditional(where, entry, before)
        self._shared_conditions(where, entry, before)
        self._wake_ups_with_events(where, entry)
        self._never_early(where, entry)
        for op in entry.ops:
            if isinstance(op, Put):
                self.store[op.key] = op.value
            else:
                self.store.pop(op.key, None)
            self._index(where, op.key, op)
        self._freed_slots_wake_their_queue(where, entry)
        for wf, old in states_before.items():
            self._frozen(where, wf, old, entry)
            self._signals_consumed(where, wf, entry, before)
            self._continue_carries_nothing(where, wf, old)
        self._updates_applied_once(where, entry, before)
        for wf in self._suspects(entry):
            self._terminal_leaves_nothing(where, wf)
            self._holds_its_slot(where, wf)
        check_schedules(self, where, entry, before, states_before)

    # -- what a write touches ---------------------------------------------------------------

    @staticmethod
    def _runs_touched(entry: JournalEntry) -> set[str]:
        return {
            keys.dec(op.key.partition[3:]) for op in entry.ops if op.key.partition.startswith("wf#")
        }

    def _suspects(self, entry: JournalEntry) -> set[str]:
        """Runs whose leftovers this write may have changed: those of its partitions, and
        those its claim-index and concurrency items name."""
        found = self._runs_touched(entry)
        for op in entry.ops:
            if not isinstance(op, Put):
                continue
            if op.key.partition.startswith("claims#"):
                found.add(keys.dec(op.key.sort))
            elif op.key.partition.startswith("conc#"):
                found.add(str(decode(op.value)["id"]))
        return found

    def _index(self, where: str, key: Key, op: Any) -> None:
        """Keep the decoded states and concurrency items, and count what bulk operations
        acted on."""
        if key.partition.startswith("timers#"):
            self._index_timer(key, op)
            return
        if key.partition.startswith("conc#"):
            items = self.concurrency.setdefault(key.partition, {})
            if isinstance(op, Put):
                items[key] = str(decode(op.value)["id"])
            else:
                items.pop(key, None)
            return
        if key.sort == keys.STATE and key.partition.startswith("wf#"):
            wf = keys.dec(key.partition[3:])
            if isinstance(op, Put):
                state = WorkflowState.from_bytes(op.value)
                self.states[wf] = state
            else:
                self.states.pop(wf, None)
            return
        if not isinstance(op, Put):
            return
        sig_id = keys.SIGNAL_ID_PREFIX + keys.enc(BULK_SIGNAL)
        if key.sort.startswith((sig_id, keys.BULK_RUN_PREFIX)):
            self.acted[key] = self.acted.get(key, 0) + 1
            if self.acted[key] > 1:
                self.file("bulk-acts-once", f"{where}: {key} acted on a second time")

    def _index_timer(self, key: Key, op: Any) -> None:
        """Note wake-up timers, and timers a capped pass moved (``n``): those left behind
        the record that points at them (a run's wake-up pointer, a schedule's ``timer``);
        they still wake what they wake, once (docs/simulation.md)."""
        if isinstance(op, Put):
            timer = decode(op.value)
            owner = str(timer["wf"])
            if timer.get("n"):
                self.moved.setdefault(owner, set()).add(key)
            elif timer.get("kind") == "wake":
                self.wake_timers.setdefault(owner, set()).add(key)
            return
        owner = keys.dec(key.sort.split("#")[1])
        self.wake_timers.get(owner, set()).discard(key)
        self.moved.get(owner, set()).discard(key)

    # -- the checks ---------------------------------------------------------------------------

    def _terminal_leaves_nothing(self, where: str, wf: str) -> None:
        """A finished run keeps no wake-up (in a lease mode: in mode none a drive in flight
        is not fenced, and may arm one after the run ended), concurrency slot or queue
        entry; it holds no claim (holder and claim-index entry) but its teardown's, while
        that runs."""
        state = self.states.get(wf)
        if state is None or state.status not in TERMINAL:
            return
        holder = holder_record(
            self.store.get(keys.owner_holder_key(wf)), self.store.get(keys.owner_head_key(wf))
        )
        if holder is not None and holder["engine_id"] != self._tearing_down(wf):
            self.file("terminal-holds-no-claim", f"{where}: {wf} is {state.status}, still claimed")
        left = []
        if self.ownership != "none":  # there a drive in flight is not fenced: it may arm one
            if keys.wake_key(wf) in self.store:
                left.append("its wake-up pointer")
            left += [f"wake-up timer {key.sort}" for key in sorted(self.wake_timers.get(wf, ()))]
        if (
            keys.claim_index_key(keys.DEFAULT_SHARDS, wf) in self.store
            and self._tearing_down(wf) is None
        ):
            left.append("its claim-index entry")
        left += [f"concurrency item {key.sort}" for key in self._concurrency_items(state)]
        if left:
            self.file("terminal-leaves-nothing", f"{where}: {wf} is {state.status}, keeps {left}")

    def _tearing_down(self, wf: str) -> str | None:
        """The engine running the run's teardown now (it holds a claim on the run)."""
        raw = self.store.get(keys.teardown_key(wf))
        record = None if raw is None else decode(raw)
        if record is None or record.get("status") != "running":
            return None
        return None if record.get("holder") is None else str(record["holder"])

    def _concurrency_items(self, state: WorkflowState) -> Iterator[Key]:
        record = state.extra.get("concurrency")
        if not record:
            return
        partition = keys.concurrency_partition(state.type, str(record["key"]))
        for key, run in self.concurrency.get(partition, {}).items():
            if run == state.id:
                yield key

    def _holds_its_slot(self, where: str, wf: str) -> None:
        """An active run of a limited type holds the slot its state names (and that slot
        names it), or is queued with its queue entry stored."""
        state = self.states.get(wf)
        record = None if state is None else state.extra.get("concurrency")
        if state is None or not record or state.status in TERMINAL:
            return
        key = str(record["key"])
        if "slot" in record:
            stored = self.store.get(keys.concurrency_slot_key(state.type, key, record["slot"]))
            if stored is None or decode(stored).get("id") != wf:
                holder = None if stored is None else decode(stored).get("id")
                self.file(
                    "runs-hold-their-slot",
                    f"{where}: {wf} is {state.status} on slot {record['slot']} of {key!r}, "
                    f"which names {holder}",
                )
        elif record.get("queued"):
            if state.type in self.rejecting:
                self.file("runs-hold-their-slot", f"{where}: {wf} of {state.type} is queued")
            queue = keys.concurrency_queue_key(state.type, key, state.created_at, wf)
            if queue not in self.store:
                self.file("runs-hold-their-slot", f"{where}: queued {wf} has no queue entry")

    def _frozen(
        self, where: str, wf: str, before: WorkflowState | None, entry: JournalEntry
    ) -> None:
        """No step, pending, attempt or update record lands on a run that was finished
        before the write and still is, and a finished run leaves its end only from failed
        (a retry) (under a lease mode: mode none fences no drive)."""
        after = self.states.get(wf)
        if self.ownership == "none" or before is None or after is None:
            return
        if before.status in TERMINAL and after.status not in TERMINAL and before.status != FAILED:
            self.file(
                "finished-runs-stay-finished",
                f"{where}: {wf} went from {before.status} to {after.status} (only a failed run "
                "leaves its end, by a retry)",
            )
        if before.status not in TERMINAL or after.status not in TERMINAL:
            return
        partition = keys.workflow_partition(wf)
        for op in entry.ops:
            if not isinstance(op, Put) or op.key.partition != partition:
                continue
            if not op.key.sort.startswith(FROZEN_FAMILIES) or _written_out(op):
                continue
            self.file(
                "finished-runs-are-frozen", f"{where}: {op.key.sort} lands on {after.status} {wf}"
            )

    def _signals_consumed(
        self, where: str, wf: str, entry: JournalEntry, before: dict[Key, bytes | None]
    ) -> None:
        """A buffered signal leaves the store only with the step that consumes it (an op
        record in the same batch), or with its run (a purge)."""
        partition = keys.workflow_partition(wf)
        gone = [
            op.key
            for op in entry.ops
            if op.key.partition == partition
            and op.key.sort.startswith(keys.SIGNAL_PREFIX)
            and not isinstance(op, Put)
            and before[op.key] is not None
        ]
        if not gone or wf not in self.states:
            return
        if not any(
            isinstance(op, Put)
            and op.key.partition == partition
            and op.key.sort.startswith((keys.OP_PREFIX, keys.OWNER_HEAD))
            for op in entry.ops
        ):
            self.file(
                "signals-leave-consumed", f"{where}: dropped {[k.sort for k in gone]} of {wf}"
            )

    def _continue_carries_nothing(self, where: str, wf: str, old: WorkflowState | None) -> None:
        """The write that continues a run as new leaves the next run none of the ended run's
        version pins or finalizer registrations: they belong to the run that made them (its
        other records are set aside by slot and deleted by the next drive)."""
        new = self.states.get(wf)
        if old is None or new is None or new.run <= old.run:
            return
        partition = keys.workflow_partition(wf)
        first = keys.step_slot(new.first_step)
        left = sorted(
            key.sort
            for key in self.store
            if key.partition == partition
            and (
                key.sort.startswith(keys.VERSION_PREFIX)
                or (
                    key.sort.startswith(keys.FINALIZER_PREFIX)
                    and key.sort[len(keys.FINALIZER_PREFIX) :].split("#", 1)[0] < first
                )
            )
        )
        if left:
            line = f"{where}: run {new.run} of {wf} kept {left}"
            self.file("continue-carries-nothing-over", line)

    # -- timers never fire early ---------------------------------------------------------

    def _never_early(self, where: str, entry: JournalEntry) -> None:
        """A sleep completes, and a retry's next attempt starts, only once due on the clock
        of the engine that wrote it: the pending record (or the failed attempt's) holds the
        due time, and the journal the writer's clock (a hint or a pass that fires a timer
        early must not make its step early)."""
        if entry.clock is None:
            return
        for op in entry.ops:
            wf = keys.dec(op.key.partition[3:]) if op.key.partition.startswith("wf#") else None
            if wf is None or not isinstance(op, Put):
                continue
            sort = op.key.sort
            if sort.startswith(keys.OP_PREFIX):
                record = decode(op.value)
                if isinstance(record, dict) and not record.get(TOMBSTONE):
                    if FENCE_EPOCH in record and _written_out_of(wf, entry):
                        continue  # a head's step written out later: committed already
                    slot = sort[len(keys.OP_PREFIX) :]
                    self._step_due(where, wf, slot, OpRecord.from_map(record), entry.clock)
            elif op.key == keys.owner_head_key(wf):
                head = Head.from_bytes(op.value)
                old = self.store.get(op.key)
                was = Head.from_bytes(old) if old is not None else None
                if head.slot is None or head.record is None:
                    continue
                if was is not None and (was.slot, was.record) == (head.slot, head.record):
                    continue  # carried over by a claim: no new step
                step = OpRecord.from_map(decode(head.record))
                self._step_due(where, wf, head.slot, step, entry.clock)
            elif sort.startswith(keys.ATTEMPT_PREFIX):
                attempt = AttemptRecord.from_bytes(op.value)
                slot = sort[len(keys.ATTEMPT_PREFIX) :].rsplit("#", 1)[0]
                if attempt.started_at is not None:
                    self._attempt_due(where, wf, slot, attempt.number, attempt.started_at)

    def _step_due(self, where: str, wf: str, slot: str, step: OpRecord, clock: float) -> None:
        pending = self.store.get(keys.pending_key(wf, slot))
        if pending is not None:
            parked = PendingRecord.from_bytes(pending)
            tag = parked.timer[1].split("#", 2)[2] if parked.timer else ""
            if parked.due is not None and tag == "s" + slot and not keys.is_due(clock, parked.due):
                self.file(
                    "timers-never-fire-early",
                    f"{where}: sleep {slot} of {wf} due at {parked.due:.3f} ended at {clock:.3f}",
                )
        if step.attempt is not None:
            self._attempt_due(where, wf, slot, step.attempt, clock)

    def _attempt_due(self, where: str, wf: str, slot: str, number: int, at: float) -> None:
        failed = self.store.get(keys.attempt_key(wf, slot, number - 1)) if number > 1 else None
        due = AttemptRecord.from_bytes(failed).due if failed is not None else None
        if due is not None and not keys.is_due(at, due):
            self.file(
                "timers-never-fire-early",
                f"{where}: attempt {number} of {wf} step {slot} due at {due:.3f} ran at {at:.3f}",
            )

    def _updates_applied_once(
        self, where: str, entry: JournalEntry, before: dict[Key, bytes | None]
    ) -> None:
        """An update is applied once: its applied record and its response are put only where
        none is stored (a second engine applying it, or another update at the same place,
        would replace what replay applies and what its sender was answered), and no two
        applied records of one run carry the same update id."""
        for op in entry.ops:
            if not isinstance(op, Put) or not op.key.partition.startswith("wf#"):
                continue
            sort = op.key.sort
            if not sort.startswith((keys.UPDATE_APPLIED_PREFIX, keys.UPDATE_RESPONSE_PREFIX)):
                continue
            if before[op.key] is not None:
                self.file("updates-applied-once", f"{where}: replaced {sort} of {op.key.partition}")
                continue
            if not sort.startswith(keys.UPDATE_APPLIED_PREFIX):
                continue
            update_id = decode(op.value).get("id")
            if update_id is None:
                continue
            for key, value in self.store.items():
                if (
                    key != op.key
                    and key.partition == op.key.partition
                    and key.sort.startswith(keys.UPDATE_APPLIED_PREFIX)
                    and decode(value).get("id") == update_id
                ):
                    self.file(
                        "updates-applied-once",
                        f"{where}: update {update_id!r} applied again at {sort} ({key.sort})",
                    )

    def _lease_fence(self, where: str, entry: JournalEntry) -> None:
        """Under ``lease`` every engine write is fenced on the current store-wide epoch by
        its holder (the lease's own records are written on their holder bytes)."""
        if self.ownership != "lease" or not entry.engine.startswith(("e", "old")):
            return
        if all(op.key.partition == keys.META_PARTITION for op in entry.ops):
            return
        epoch_key = keys.meta_key(keys.LEASE_EPOCH)
        fence = [c for c in entry.conditions if c.key == epoch_key]
        current = self.store.get(epoch_key)
        holder = self.store.get(keys.meta_key(keys.LEASE_HOLDER))
        held_by = None if holder is None else decode(holder)["engine_id"]
        if not fence or fence[0].expected != current:
            self.file("no-deposed-writes", f"{where} is not fenced on the current lease epoch")
        elif held_by != entry.engine:
            self.file("no-deposed-writes", f"{where} landed while {held_by} held the lease")

    def _holders_conditional(
        self, where: str, entry: JournalEntry, before: dict[Key, bytes | None]
    ) -> None:
        """A claim's holder record (a run's, or the store lease's) is written only on the
        bytes it replaces: a renewal or takeover that lost its race lands nothing."""
        for op in entry.ops:
            if not isinstance(op, Put) or op.key.sort not in HOLDERS:
                continue
            condition = next((c for c in entry.conditions if c.key == op.key), None)
            if condition is None or condition.expected != before[op.key]:
                self.file(
                    "no-deposed-writes", f"{where}: holder {op.key} written without its condition"
                )

    def _shared_conditions(
        self, where: str, entry: JournalEntry, before: dict[Key, bytes | None]
    ) -> None:
        """Every write of a schedule's or a bulk operation's record is conditioned on the
        bytes it replaces: two engines never both move one on."""
        for op in entry.ops:
            invariant = CONDITIONAL_RECORDS.get(op.key.partition)
            if invariant is None:
                continue
            condition = next((c for c in entry.conditions if c.key == op.key), None)
            if condition is None or condition.expected != before[op.key]:
                self.file(
                    invariant,
                    f"{where}: {keys.dec(op.key.sort)} written without a condition on the "
                    "record it replaces",
                )

    def _wake_ups_with_events(self, where: str, entry: JournalEntry) -> None:
        """A write that stores an event a parked run waits for (a signal, a child's end, an
        async completion) arms a timer that wakes the run in the same batch: the process
        that wrote it may die before it drives the run (ADR 0009)."""
        woken = {
            str(decode(op.value).get("wf"))
            for op in entry.ops
            if isinstance(op, Put) and op.key.partition.startswith("timers#")
        }
        for op in entry.ops:
            if not isinstance(op, Put) or not op.key.sort.startswith(EVENT_FAMILIES):
                continue
            if not op.key.partition.startswith("wf#"):
                continue
            wf = keys.dec(op.key.partition[3:])
            if wf not in woken:
                self.file(
                    "events-carry-their-wake-up", f"{where}: {op.key.sort} of {wf} wakes nothing"
                )

    def _freed_slots_wake_their_queue(self, where: str, entry: JournalEntry) -> None:
        """A write that frees a slot of a key with a run waiting in its queue arms that key's
        admit timer in the same batch: the process that wrote it may die before it admits
        the run inline, and the timer is then the queued run's only way in (ADR 0025)."""
        armed = {
            str(decode(op.value).get("wf"))
            for op in entry.ops
            if isinstance(op, Put) and op.key.partition.startswith("timers#")
        }
        for op in entry.ops:
            if isinstance(op, Put) or not op.key.partition.startswith("conc#"):
                continue
            if not op.key.sort.startswith(keys.SLOT_PREFIX):
                continue
            waiting = self._waiting(op.key.partition)
            if waiting is None:
                continue
            gate = concurrency.gate_id(waiting.type, str(waiting.extra["concurrency"]["key"]))
            if gate not in armed:
                self.file(
                    "freed-slots-wake-their-queue",
                    f"{where}: frees {keys.dec(op.key.sort)} of {gate}, {waiting.id} is "
                    "queued there, and no admit timer is armed",
                )

    def _waiting(self, partition: str) -> WorkflowState | None:
        """A run queued in ``partition`` that an admission would take (not a suspended one:
        its resume arms the admit timer)."""
        for key in self.store:
            if key.partition != partition or not key.sort.startswith(keys.QUEUE_PREFIX):
                continue
            state = self.states.get(str(decode(self.store[key])["id"]))
            if state is not None and state.status == PENDING and is_queued(state):
                return state
        return None


def _written_out(op: Put) -> bool:
    """A head's step written out to its own record (or a record no reader counts): a copy
    of a step committed before, not a new one (``sim_steps`` checks those)."""
    if not op.key.sort.startswith(keys.OP_PREFIX):
        return False
    record = decode(op.value)
    return isinstance(record, dict) and FENCE_EPOCH in record
