"""The typed records a workflow's partition and the timer shards hold, beside ``WorkflowState``.

Each class maps its named fields to the short msgpack keys stored today, in one place: the
keys, their order and which ones are left out when unset ARE the stored format, and
``tests/unit/test_record_bytes.py`` pins the bytes of each. A key a class does not know (a
newer release's) is ignored on read, as it always was. ``from_map`` reads an already decoded
record; ``from_bytes`` decodes too. Neither checks the schema version: the readers that did
(``records.load_history``, the maintenance pass, through ``codec.decode_record``) still do.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from weft_serverless.codec import decode, encode

MAX_ATTEMPT_MESSAGE = 1024

FENCE_EPOCH = "fe"
"""The epoch an op record was committed on, stamped in records committed on a head."""
TOMBSTONE = "tomb"
REFERENCE = "ref"


class _Absent(enum.Enum):
    ABSENT = 0


ABSENT = _Absent.ABSENT
"""No result stored (a result may be stored as nil, which is not the same bytes)."""


class OpRecord:
    """A committed step (``op#slot``): its signature and when it was committed, how it ended,
    and the ownership marks a head commit (ADR 0037) stamps on it.

    Unlike the other records it is a read-only view over its stored map, not a copy of it:
    a partition read wraps thousands of these without unpacking them (replay reads a field
    or two of each), and a commit writes the very map its writer built. Build one with
    keywords (``holding`` for a result), never by spelling its keys.
    """

    __slots__ = ("_fields",)
    _fields: dict[str, Any]

    def __init__(
        self,
        *,
        signature: str | None = None,
        at: float | None = None,
        ok: bool = True,
        index: int | None = None,  # the winning branch of a race
        value: bytes | _Absent | None = ABSENT,  # the step's encoded result
        attempt: int | None = None,  # the activity attempt that gave the value
        reconciled: bool = False,  # the value came from an idempotent activity's verify()
        error: dict[str, Any] | None = None,  # an error record (records.error_record)
        count: int | None = None,  # the branches of an ``all``
        retries: int | None = None,  # the run's retry count when the step committed
        reference: str | None = None,  # the digest of the blob holding the record
        tombstone: bool = False,  # a step a retry of the run forgot
        fence_epoch: int | None = None,  # the claim's epoch a head commit ran on
    ) -> None:
        fields: dict[str, Any] = {}
        if signature is not None:
            fields["sig"] = signature
        if at is not None:
            fields["at"] = at
        if not ok:
            fields["ok"] = False
        if index is not None:
            fields["i"] = index
        if value is not ABSENT:
            fields["v"] = value
        if attempt is not None:
            fields["a"] = attempt
        if reconciled:
            fields["reconciled"] = True
        if error is not None:
            fields["err"] = error
        if count is not None:
            fields["n"] = count
        if retries:
            fields["r"] = retries
        if reference is not None:
            fields[REFERENCE] = reference
        if tombstone:
            fields[TOMBSTONE] = True
        if fence_epoch is not None:
            fields[FENCE_EPOCH] = fence_epoch
        self._fields = fields

    @classmethod
    def holding(cls, value: bytes | None, **fields: Any) -> OpRecord:
        """A record whose result is ``value`` (stored even when nil)."""
        if not fields:
            return cls.from_map({"v": value})
        return cls(value=value, **fields)

    @classmethod
    def activity_result(cls, value: bytes | None, attempt: int) -> OpRecord:
        """An activity's result and the attempt that gave it: most steps' record, built
        here without the general constructor's checks (it is on every step's path)."""
        return cls.from_map({"v": value, "a": attempt})

    @classmethod
    def from_map(cls, raw: dict[str, Any]) -> OpRecord:
        """The record a decoded map holds (wrapped, not copied: the map is not changed after)."""
        record = object.__new__(cls)
        record._fields = raw
        return record

    @classmethod
    def from_bytes(cls, data: bytes) -> OpRecord:
        return cls.from_map(decode(data))

    def to_bytes(self) -> bytes:
        return encode(self._fields)

    def committed(
        self, signature: str, at: float, retries: int | None, fence_epoch: int | None
    ) -> OpRecord:
        """This step's outcome as committed: what every op record carries beside it."""
        fields = {"sig": signature, "at": at, **self._fields}
        if retries:  # its event id stays apart from the records a retry set aside
            fields["r"] = retries
        if fence_epoch is not None:
            fields[FENCE_EPOCH] = fence_epoch
        return OpRecord.from_map(fields)

    def fenced(self, fence_epoch: int) -> OpRecord:
        """This record stamped with the claim's epoch it commits on (last, as ``committed``
        puts it)."""
        return OpRecord.from_map({**self._fields, FENCE_EPOCH: fence_epoch})

    def kept(self) -> dict[str, Any]:
        """What a retry of the run keeps of a step it sets aside (in its retry record):
        enough for its event and its row, not its value."""
        fields = self._fields
        return {name: fields[name] for name in _KEPT if name in fields}

    @property
    def signature(self) -> str:
        return str(self._fields.get("sig", ""))

    @property
    def at(self) -> float | None:
        return self._fields.get("at")

    @property
    def ok(self) -> bool:
        return bool(self._fields.get("ok", True))

    @property
    def index(self) -> int | None:
        return self._fields.get("i")

    @property
    def value(self) -> bytes | None:
        return self._fields.get("v")

    @property
    def has_value(self) -> bool:
        """Whether a result is stored (nil included): a signal wait received one."""
        return "v" in self._fields

    @property
    def attempt(self) -> int | None:
        return self._fields.get("a")

    @property
    def reconciled(self) -> bool:
        return bool(self._fields.get("reconciled"))

    @property
    def error(self) -> dict[str, Any] | None:
        return self._fields.get("err")

    @property
    def count(self) -> int | None:
        return self._fields.get("n")

    @property
    def retries(self) -> int | None:
        return self._fields.get("r")

    @property
    def reference(self) -> str | None:
        return self._fields.get(REFERENCE)

    @property
    def tombstone(self) -> bool:
        return bool(self._fields.get(TOMBSTONE))

    @property
    def fence_epoch(self) -> int | None:
        return self._fields.get(FENCE_EPOCH)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpRecord) and self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpRecord({self._fields!r})"


_KEPT = ("sig", "at", "ok", "err", "a", "r", "i")


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """A failed activity attempt that will be retried (``att#slot#n``): the failure, the
    step's first attempt and latest heartbeat, and the retry timer it is parked on."""

    number: int
    error_type: str
    message: str
    at: float
    traceback: str | None = None
    started_at: float | None = None  # when the attempt was prepared (a synchronous one)
    first_at: float | None = None  # when the step's first attempt was prepared
    heartbeat: bytes | None = None  # the newest details heartbeat so far, encoded
    signature: str | None = None
    due: float | None = None
    timer: list[str] | None = None

    @classmethod
    def failed(
        cls,
        number: int,
        error_type: str,
        message: str,
        at: float,
        traceback: str | None = None,
        started_at: float | None = None,
    ) -> AttemptRecord:
        """The stored facts of one failed attempt, its type and message cut to size."""
        if len(message) > MAX_ATTEMPT_MESSAGE:
            extra = len(message) - MAX_ATTEMPT_MESSAGE
            message = message[:MAX_ATTEMPT_MESSAGE] + f"... [{extra} more characters]"
        return cls(number, error_type[:256], message, at, traceback, started_at)

    def parked(self, signature: str, due: float, timer: list[str]) -> AttemptRecord:
        return replace(self, signature=signature, due=due, timer=timer)

    def to_bytes(self) -> bytes:
        fields: dict[str, Any] = {
            "n": self.number,
            "type": self.error_type,
            "message": self.message,
            "at": self.at,
        }
        _put_present(
            fields,
            ("tb", self.traceback),
            ("s", self.started_at),
            ("first", self.first_at),
            ("hb", self.heartbeat),
            ("sig", self.signature),
            ("due", self.due),
            ("timer", self.timer),
        )
        return encode(fields)

    @classmethod
    def from_map(cls, raw: Mapping[str, Any]) -> AttemptRecord:
        get = raw.get
        return cls(
            number=int(raw["n"]),
            error_type=get("type", ""),
            message=get("message", ""),
            at=raw["at"],
            traceback=get("tb"),
            started_at=get("s"),
            first_at=get("first"),
            heartbeat=get("hb"),
            signature=get("sig"),
            due=get("due"),
            timer=get("timer"),
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> AttemptRecord:
        return cls.from_map(decode(data))


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """What a parked step waits on (``pend#slot``): a timer (sleep, a wait's timeout), a
    child run, or an asynchronous activity attempt (its slot is ``slot@attempt``)."""

    child_id: str | None = None
    policy: str | None = None  # the child's parent-close policy
    async_attempt: int | None = None
    at: float | None = None
    signature: str | None = None
    due: float | None = None
    timer: list[str] | None = None

    def parked(self, signature: str, due: float, timer: list[str]) -> PendingRecord:
        return replace(self, signature=signature, due=due, timer=timer)

    def to_bytes(self) -> bytes:
        fields: dict[str, Any] = {}
        _put_present(
            fields,
            ("child_id", self.child_id),
            ("policy", self.policy),
            ("async", self.async_attempt),
            ("at", self.at),
            ("sig", self.signature),
            ("due", self.due),
            ("timer", self.timer),
        )
        return encode(fields)

    @classmethod
    def from_map(cls, raw: Mapping[str, Any]) -> PendingRecord:
        get = raw.get
        return cls(
            child_id=get("child_id"),
            policy=get("policy"),
            async_attempt=get("async"),
            at=get("at"),
            signature=get("sig"),
            due=get("due"),
            timer=get("timer"),
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PendingRecord:
        return cls.from_map(decode(data))


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A buffered signal (``sig#name#seq``): its encoded payload, its deduplication id,
    when it arrived and the timer that wakes the run for it."""

    value: bytes | None
    signal_id: str | None
    at: float | None
    timer: list[str] | None

    def to_bytes(self) -> bytes:
        return encode({"v": self.value, "id": self.signal_id, "at": self.at, "timer": self.timer})

    @classmethod
    def from_map(cls, raw: Mapping[str, Any]) -> SignalRecord:
        get = raw.get
        return cls(get("v"), get("id"), get("at"), get("timer"))

    @classmethod
    def from_bytes(cls, data: bytes) -> SignalRecord:
        return cls.from_map(decode(data))


@dataclass(frozen=True, slots=True)
class UpdateRecord:
    """An update applied at a park point (``upa#slot#seq``): replay applies it again."""

    update_id: str | None
    name: str
    payload: bytes
    at: float | None

    def to_bytes(self) -> bytes:
        return encode(
            {"id": self.update_id, "name": self.name, "payload": self.payload, "at": self.at}
        )

    @classmethod
    def from_map(cls, raw: Mapping[str, Any]) -> UpdateRecord:
        get = raw.get
        return cls(get("id"), raw["name"], raw["payload"], get("at"))

    @classmethod
    def from_bytes(cls, data: bytes) -> UpdateRecord:
        return cls.from_map(decode(data))


@dataclass(frozen=True, slots=True)
class UpdateResponse:
    """An applied update's encoded result, read by id when the update is sent again."""

    value: bytes
    name: str
    at: float

    def to_bytes(self) -> bytes:
        return encode({"v": self.value, "name": self.name, "at": self.at})

    @classmethod
    def from_bytes(cls, data: bytes) -> UpdateResponse:
        raw = decode(data)
        return cls(raw["v"], raw.get("name", ""), raw.get("at", 0.0))


@dataclass(frozen=True, slots=True)
class TimerRecord:
    """A timer's value in its shard: the run (or schedule, gate, operation) it is for and
    its kind's name; ``retained`` counts the passes that had to leave it (its backoff)."""

    workflow_id: str
    kind: str
    retained: int = 0

    def to_bytes(self) -> bytes:
        if self.retained:
            return encode({"wf": self.workflow_id, "kind": self.kind, "n": self.retained})
        return encode({"wf": self.workflow_id, "kind": self.kind})

    @classmethod
    def from_map(cls, raw: Mapping[str, Any]) -> TimerRecord:
        return cls(raw["wf"], raw["kind"], int(raw.get("n", 0)))

    @classmethod
    def from_bytes(cls, data: bytes) -> TimerRecord:
        return cls.from_map(decode(data))


def _put_present(fields: dict[str, Any], *pairs: tuple[str, Any]) -> None:
    """Add each ``(key, value)`` whose value is set: an unset field is absent from the stored
    map, not nil, so the bytes stay those of the maps written before the records had classes."""
    for name, value in pairs:
        if value is not None:
            fields[name] = value
