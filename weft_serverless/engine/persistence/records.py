"""The persisted records of one workflow, and reading them back in one range read.

Records are msgpack maps. Payloads (input, results, signal payloads) are stored already
encoded as bytes inside them: their size is checked once, and replay decodes only what it uses.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import (
    SCHEMA_VERSION,
    check_schema_version,
    decode,
    decode_record,
    encode,
)
from weft_serverless.engine.persistence import run_head
from weft_serverless.engine.persistence.slot_table import SlotTable
from weft_serverless.engine.persistence.stored_records import (
    AttemptRecord,
    OpRecord,
    PendingRecord,
    SignalRecord,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Op, Put, Storage

RUNNING = "running"
PENDING = "pending"
SUSPENDED = "suspended"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TIMED_OUT = "timed-out"
STATUSES = (PENDING, RUNNING, SUSPENDED, COMPLETED, FAILED, CANCELLED, TIMED_OUT)
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, TIMED_OUT})


RUN_FIELD = "run"
FIRST_STEP_FIELD = "base"
SCHEDULE_FIELD = "schedule"
"""The run's state names the schedule that started it."""


@dataclass(slots=True)
class WorkflowState:
    """The head record of a workflow: who it is and where it stands."""

    id: str
    type: str
    version: str
    status: str
    input: bytes
    created_at: float
    updated_at: float
    result: bytes | None = None
    error: dict[str, Any] | None = None
    parent: dict[str, Any] | None = None
    idempotency_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The result is in its own record (keys.result_key): input and result did not fit in one.
    result_apart: bool = False

    @property
    def run(self) -> int:
        """Which run of this workflow id this is: 1, then one more per ``continue_as_new``."""
        return int(self.extra.get(RUN_FIELD, 1))

    @property
    def schedule_id(self) -> str | None:
        """The schedule that started this run, if one did."""
        found = self.extra.get(SCHEDULE_FIELD)
        return None if found is None else str(found)

    @property
    def first_step(self) -> int:
        """The step counter this run's first step takes: runs of one id never share a slot,
        so an earlier run's records, until deleted, are told apart by their slot alone."""
        return int(self.extra.get(FIRST_STEP_FIELD, 0))

    def to_bytes(self) -> bytes:
        apart = {"rapart": True} if self.result_apart else {}
        return encode(
            {
                "sv": SCHEMA_VERSION,
                "id": self.id,
                "type": self.type,
                "version": self.version,
                "status": self.status,
                "input": self.input,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "result": self.result,
                "error": self.error,
                "parent": self.parent,
                "idem": self.idempotency_key,
                "extra": self.extra,
                **apart,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> WorkflowState:
        """Read a stored state; a format this release does not know raises before any use."""
        raw = decode(data)
        check_schema_version(raw, f"the state of workflow {raw.get('id')!r}")
        return cls(
            id=raw["id"],
            type=raw["type"],
            version=raw["version"],
            status=raw["status"],
            input=raw["input"],
            created_at=raw["created_at"],
            updated_at=raw["updated_at"],
            result=raw.get("result"),
            error=raw.get("error"),
            parent=raw.get("parent"),
            idempotency_key=raw.get("idem"),
            extra=raw.get("extra") or {},
            result_apart=bool(raw.get("rapart")),
        )


MAX_ERROR_MESSAGE = 4096


def cut_message(message: str) -> str:
    """Long error messages are cut, so a failure always fits in one record."""
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[:MAX_ERROR_MESSAGE] + f"... [{len(message) - MAX_ERROR_MESSAGE} more characters]"


ATTEMPT_HISTORY = 10
"""Failed attempts kept per step (the newest); older retry records are deleted as new ones land."""


def error_record(kind: str, error_type: str, message: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "type": error_type[:256], "message": cut_message(message), **fields}


@dataclass(slots=True)
class History:
    """Everything stored in one workflow's partition, grouped for the driver."""

    state: WorkflowState
    state_bytes: bytes
    ops: dict[str, OpRecord] = field(default_factory=dict)
    # Indexed by step scope: a finishing step finds what it left without walking history.
    pending: SlotTable[PendingRecord] = field(default_factory=SlotTable)
    attempts: SlotTable[list[AttemptRecord]] = field(default_factory=SlotTable)
    # Buffered signals by name, oldest first: a deque, as steps consume them from the front.
    signals: dict[str, deque[tuple[str, bytes, SignalRecord]]] = field(default_factory=dict)
    children: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The stored step, update and version records: what replay to the park point rebuilds.
    replayed: dict[str, bytes] = field(default_factory=dict)
    # Encoded update records per park slot, decoded only when replayed (there can be many).
    updates_applied: dict[str, list[bytes]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    async_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    heartbeats: dict[str, dict[str, Any]] = field(default_factory=dict)  # by step slot
    wake: list[str] | None = None  # the wake-up timer of a run not parked since it was armed
    # The owner epoch stored when the partition was read (workflow-lease): a drive compares it
    # with the claim it runs on before it runs anything (the read costs nothing extra).
    owner_epoch: bytes | None = None
    # The run's head (workflow-lease, layout 2; None otherwise), the op items the reader rule
    # voided (their bytes by slot: a write-out there must expect them), and the head's inline
    # step when it is not written out yet (engine/persistence/run_head.py).
    head: bytes | None = None
    void_ops: dict[str, bytes] = field(default_factory=dict)
    unwritten: tuple[run_head.Unwritten, ...] = ()
    blobs: dict[str, bytes] = field(default_factory=dict)  # large op records, by slot#digest
    # Sort keys of records an earlier run (before a continue_as_new) left: never replayed,
    # deleted by the next drive (see engine/runs/continuation.py).
    earlier: list[str] = field(default_factory=list)
    # This run's registered finalizers (``ctx.on_cancel``) by ``{slot}#{position}``.
    finalizers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The run's retries by the step they ran again, oldest first (``retry_history``).
    retries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def top_level_steps(self) -> int:
        return sum(1 for slot in self.ops if "." not in slot)

    def note(self, ops: Sequence[Op]) -> None:
        """Record this run's own committed step, update and version writes in ``replayed``,
        as a fresh read would see them."""
        partition = keys.workflow_partition(self.state.id)
        for op in ops:
            sort = op.key.sort
            if op.key.partition != partition or not sort.startswith(_REPLAYED):
                continue
            if isinstance(op, Put):
                self.replayed[sort] = bytes(op.value)
            else:
                self.replayed.pop(sort, None)

    def replay_fingerprint(self) -> tuple[Any, ...]:
        """What a replay up to the park point depends on: the run's identity and its step,
        update and version records, byte for byte (a parked generator is reusable only
        while a fresh read would give exactly these)."""
        s = self.state
        return (s.id, s.type, s.version, s.input, s.created_at, self.replayed)


def load_history(storage: Storage, workflow_id: str) -> History | None:
    """Read a workflow's partition (one ordered, strongly consistent range read).

    Every record is checked for a schema version this release reads before any is used, so a
    partition holding a newer release's record raises ``UnsupportedSchemaVersionError``.
    """
    return history_of(workflow_id, storage.scan(keys.workflow_partition(workflow_id)))


def history_of(workflow_id: str, rows: Iterable[tuple[str, bytes]]) -> History | None:
    """The history the rows of a workflow's partition hold, in sort order (``load_history``
    reads them; a claim that read them before it landed hands them on, ADR 0058)."""
    state_bytes: bytes | None = None
    h = History(_PLACEHOLDER, b"")
    slotted: list[tuple[str, str]] = []
    for sort, value in rows:
        if sort.startswith(_REPLAYED):
            h.replayed[sort] = value
        family, _, rest = sort.partition("#")
        if family in _SLOTTED_FAMILIES:
            slotted.append((sort, rest.split("#", 1)[0]))
        if family in _DECODED_FAMILIES:  # first: nearly every record is one of these
            record = decode_record(value, f"record {sort!r} of workflow {workflow_id!r}")
            _file(h, family, rest, sort, value, record)
        elif sort == keys.STATE:
            state_bytes = value
        elif family == _UPDATE_RESPONSE:
            continue  # update responses: read by id when an update is retried, never here
        elif family == _UPDATE_APPLIED:
            # kept encoded: decoded (and its format checked) only when a replay needs it
            h.updates_applied.setdefault(rest.split("#", 1)[0], []).append(value)
        elif sort == keys.WAKE:
            h.wake = decode_record(value, f"the wake-up of workflow {workflow_id!r}")["timer"]
        elif sort == keys.OWNER_EPOCH:
            h.owner_epoch = value
        elif sort == keys.OWNER_HEAD:
            h.head = value
        elif family == _BLOB:
            h.blobs[rest] = value
    if state_bytes is None:
        return None
    h.state, h.state_bytes = WorkflowState.from_bytes(state_bytes), state_bytes
    if h.head is not None:
        h.void_ops, h.unwritten = run_head.settle(h.head, h.ops, h.replayed)
        parked = run_head.Head.from_bytes(h.head).park()
        if parked is not None and parked[0] not in h.pending:  # the park a head carries
            slot, pending = parked
            h.pending[slot] = PendingRecord.from_map(
                decode_record(pending, f"the park of workflow {workflow_id!r}")
            )
        for step in h.unwritten:
            if step.expected is None:  # no item in the scan
                slotted.append((keys.OP_PREFIX + step.slot, step.slot))
    if h.state.first_step > 0:
        _drop_earlier_runs(h, slotted)
    if h.head is not None:  # after the set-aside: an earlier run's blobs may be gone already
        run_head.resolve(h.ops, h.blobs, f"workflow {workflow_id!r}")
    return h


def _drop_earlier_runs(h: History, slotted: list[tuple[str, str]]) -> None:
    """Set aside the records of runs before a ``continue_as_new``: their step slots are
    below this run's first step. Replay never sees them; ``h.earlier`` names them."""
    first = h.state.first_step
    old = {slot for _, slot in slotted if keys.counter_value(keys.top_slot(slot)) < first}
    if not old:
        return
    h.earlier = [sort for sort, slot in slotted if slot in old]
    tables = (h.ops, h.pending, h.children, h.attempts, h.updates_applied, h.heartbeats)
    for table in (*tables, h.retries):
        for slot in old & table.keys():
            del table[slot]
    for ref_table in (h.async_results, h.started, h.finalizers, h.blobs):
        for ref in [ref for ref in ref_table if ref.split("#", 1)[0] in old]:
            del ref_table[ref]
    for sort in h.earlier:
        h.replayed.pop(sort, None)
    # an earlier run's step: set aside, never written out again
    h.unwritten = tuple(step for step in h.unwritten if step.slot not in old)


def _family(prefix: str) -> str:
    """The family a key prefix names (``op#`` -> ``op``): what ``sort.partition("#")`` yields."""
    return prefix.removesuffix("#")


_OP = _family(keys.OP_PREFIX)
_PENDING = _family(keys.PENDING_PREFIX)
_ATTEMPT = _family(keys.ATTEMPT_PREFIX)
_SIGNAL = _family(keys.SIGNAL_PREFIX)
_CHILD = _family(keys.CHILD_PREFIX)
_VERSION = _family(keys.VERSION_PREFIX)
_ASYNC_RESULT = _family(keys.ASYNC_RESULT_PREFIX)
_ACTIVITY_STARTED = _family(keys.ACTIVITY_STARTED_PREFIX)
_UPDATE_APPLIED = _family(keys.UPDATE_APPLIED_PREFIX)
_UPDATE_RESPONSE = _family(keys.UPDATE_RESPONSE_PREFIX)
_HEARTBEAT = _family(keys.HEARTBEAT_PREFIX)
_FINALIZER = _family(keys.FINALIZER_PREFIX)
_BLOB = _family(keys.BLOB_PREFIX)
_RETRY = _family(keys.RETRY_PREFIX)
_DECODED_FAMILIES = frozenset(
    {_OP, _PENDING, _ATTEMPT, _SIGNAL, _CHILD, _VERSION, _ASYNC_RESULT, _ACTIVITY_STARTED}
    | {_HEARTBEAT, _FINALIZER, _RETRY}
)


def _file(h: History, family: str, rest: str, sort: str, value: bytes, record: Any) -> None:
    """Put one decoded partition record where the driver looks for it."""
    if family == _OP:
        h.ops[rest] = OpRecord.from_map(record)
    elif family == _PENDING:
        h.pending[rest] = PendingRecord.from_map(record)
    elif family == _ATTEMPT:
        h.attempts.setdefault(rest.rsplit("#", 1)[0], []).append(AttemptRecord.from_map(record))
    elif family == _SIGNAL:
        name = keys.dec(rest.split("#", 1)[0])
        h.signals.setdefault(name, deque()).append((sort, value, SignalRecord.from_map(record)))
    elif family == _CHILD:
        h.children[rest] = record
    elif family == _VERSION:
        h.versions[keys.dec(rest)] = record["v"]
    elif family == _ASYNC_RESULT:
        h.async_results[rest] = record
    elif family == _ACTIVITY_STARTED:
        h.started[rest] = record
    elif family == _HEARTBEAT:
        h.heartbeats[rest] = record
    elif family == _FINALIZER:
        h.finalizers[rest] = record
    elif family == _RETRY:
        h.retries.setdefault(rest.rsplit("#", 1)[0], []).append(record)


_SLOTTED_FAMILIES = frozenset(
    {_OP, _PENDING, _ATTEMPT, _CHILD, _ASYNC_RESULT, _ACTIVITY_STARTED, _UPDATE_APPLIED}
    | {_HEARTBEAT, _FINALIZER, _BLOB, _RETRY}
)
"""Families whose key starts with the step slot they belong to (after ``family#``)."""

_REPLAYED = (keys.OP_PREFIX, keys.UPDATE_APPLIED_PREFIX, keys.VERSION_PREFIX)
_PLACEHOLDER = WorkflowState("", "", "", "", b"", 0.0, 0.0)
