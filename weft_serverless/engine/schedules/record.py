"""A schedule's stored record: its definition, where it stands, and its counters.

One record per schedule under ``keys.schedule_key``; every change is a conditional write on
the bytes read (plus the ownership fence), so two engines never both advance one fire. The
record points at the timer of its next fire (``timer``) so pausing, updating and deleting can
drop it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from weft_serverless.codec import SCHEMA_VERSION, check_schema_version, decode, encode
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.schedules.spec import Spec
from weft_serverless.errors import ScheduleNotFoundError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Delete, Key, Op, Put


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """``next``: the nominal time of the next fire (None: paused or past ``end_at``);
    ``queued``: a fire waiting for the previous run to end (overlap ``queue``)."""

    id: str
    workflow_type: str
    input: bytes
    spec: Spec
    created_at: float
    paused: bool = False
    next: float | None = None
    timer: list[str] | None = None
    last: float | None = None
    fired: int = 0
    missed: int = 0
    skipped: int = 0
    running: tuple[str, ...] = ()
    queued: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return encode(
            {
                "sv": SCHEMA_VERSION,
                "id": self.id,
                "type": self.workflow_type,
                "input": self.input,
                "spec": self.spec.as_dict(),
                "created_at": self.created_at,
                "paused": self.paused,
                "next": self.next,
                "timer": self.timer,
                "last": self.last,
                "fired": self.fired,
                "missed": self.missed,
                "skipped": self.skipped,
                "running": list(self.running),
                "queued": self.queued,
                "extra": self.extra,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ScheduleRecord:
        raw = decode(data)
        check_schema_version(raw, f"schedule {raw.get('id')!r}")
        return cls(
            id=raw["id"],
            workflow_type=raw["type"],
            input=raw["input"],
            spec=Spec.from_dict(raw["spec"]),
            created_at=raw["created_at"],
            paused=raw["paused"],
            next=raw["next"],
            timer=raw["timer"],
            last=raw["last"],
            fired=raw["fired"],
            missed=raw["missed"],
            skipped=raw["skipped"],
            running=tuple(raw["running"]),
            queued=raw["queued"],
            extra=raw.get("extra") or {},
        )

    def timer_key(self) -> Key | None:
        return None if self.timer is None else Key(self.timer[0], self.timer[1])

    def rearmed(self, rt: Runtime, after: float) -> tuple[ScheduleRecord, list[Op]]:
        """This record with its next fire the first one after ``after``, and the writes that
        arm that fire's timer and drop the one the record pointed at (if any, and not due:
        a due one is being fired and the pass deletes it)."""
        ops: list[Op] = []
        old = self.timer_key()
        if old is not None and not keys.is_due(rt.now(), keys.timer_due_of(old.sort)):
            ops.append(Delete(old))
        upcoming = None if self.paused else self.spec.next_after(after)
        if upcoming is None:
            return replace(self, next=None, timer=None), ops
        put = timers.arm(rt.shards, timers.SCHEDULE, self.id, self.spec.due(self.id, upcoming))
        if old is not None and put.key == old:
            ops = [op for op in ops if op.key != old]
        ops.append(put)
        return replace(self, next=upcoming, timer=timers.timer_ref(put.key)), ops


def read(rt: Runtime, schedule_id: str) -> tuple[ScheduleRecord, bytes]:
    """The stored record and its bytes (the condition of the next write)."""
    data = rt.storage.get(keys.schedule_key(schedule_id))
    if data is None:
        raise ScheduleNotFoundError(schedule_id)
    return ScheduleRecord.from_bytes(data), data


def put_op(record: ScheduleRecord) -> Put:
    """The op that stores ``record``, for the batch that changes it."""
    return Put(keys.schedule_key(record.id), record.to_bytes())
