"""The run's head under workflow-lease: the fence a plain step commits on in one write.

A run started on a store of layout 2 (``workflow-lease@2``) has a head item beside its owner
epoch: ``{e: epoch, f: floor, s: slot, r: record}``. A forward step is one conditional put of
the head, on the bytes its owner last wrote, carrying the step's op record inline; the
previous inline record is written out to its own ``op#`` item on condition that the slot is
as the owner last read it (ADR 0037): before the head put, or beside it when the head carries
that record too (``s2``, ``r2``: both within one write unit, ADR 0057), so a crash between
the two loses nothing. Every claim and rotation rewrites the head with the epoch, so a
deposed owner's head put can never land.

A write-out is the one write a deposed owner can still land, and only of a step that was
committed. Two marks keep it from counting where it must not:

* a **tombstone** (``{tomb, fe}``) replaces an op record that ``retry`` forgets, stamped with
  the epoch of the claim that forgot it: a late write-out of the old step finds the slot
  taken, and the inline copy an older head still holds is older than the tombstone;
* the **floor** is the epoch the run started on: an op item stamped below it was written out
  by an owner of an earlier run of the same id (purged since), and counts for nothing.

``settle`` is the one reader rule; ``records.load_history`` applies it to every partition
read, so replay, inspection, events and the history limit all see the same steps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from weft_serverless.codec import decode, decode_record, encode
from weft_serverless.engine.persistence.stored_records import FENCE_EPOCH as FENCE_EPOCH
from weft_serverless.engine.persistence.stored_records import REFERENCE as REFERENCE
from weft_serverless.engine.persistence.stored_records import TOMBSTONE as TOMBSTONE
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.errors import StorageError
from weft_serverless.storage import keys

INLINE = 900
"""The largest op record a head carries inline: with the head's own fields it stays within
one write unit. A larger record is put first as a blob, and the head carries a reference.
Two records that together fit in it ride in one head (``pairs``)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds the run's claim, carried in its head on a store of layout 3 (ADR 0056):
    ``{h: engine id, x: expires at, c: claimed at}``. The holder moves with the epoch, so one
    conditional put of the head acquires, renews or releases the claim."""

    engine_id: str
    expires_at: float
    claimed_at: float

    def record(self, epoch: int) -> dict[str, Any]:
        """The holder as the old layout's holder item spelled it (describe, inspection)."""
        return {
            "engine_id": self.engine_id,
            "epoch": epoch,
            "expires_at": self.expires_at,
            "claimed_at": self.claimed_at,
        }


@dataclass(frozen=True, slots=True)
class Head:
    """``slot``/``record``: the newest step. ``prior_slot``/``prior_record``: the step before
    it, carried while its write-out travels beside this head's put (absent in heads written
    before ADR 0057, which read as they did). ``holder``: who holds the run's claim, on a
    store of layout 3 (ADR 0056; absent on older layouts and when nobody holds it).
    ``park_slot``/``park_record``: the pending record of the top-level step the run parked
    on, on a store of layout 4 (ADR 0058): the park is one conditional put of the head, not
    a transaction of the pending item and a head check. It stays until the next step commits
    on the head (a step after the park means the parked step is done)."""

    epoch: int
    floor: int
    slot: str | None = None
    record: bytes | None = None
    prior_slot: str | None = None
    prior_record: bytes | None = None
    holder: Holder | None = None
    park_slot: str | None = None
    park_record: bytes | None = None

    def to_bytes(self) -> bytes:
        fields: dict[str, Any] = {"e": self.epoch, "f": self.floor}
        if self.slot is not None and self.record is not None:
            fields["s"], fields["r"] = self.slot, self.record
            if self.prior_slot is not None and self.prior_record is not None:
                fields["s2"], fields["r2"] = self.prior_slot, self.prior_record
        if self.holder is not None:
            held = self.holder
            fields["h"], fields["x"], fields["c"] = held.engine_id, held.expires_at, held.claimed_at
        if self.park_slot is not None and self.park_record is not None:
            fields["p"], fields["pr"] = self.park_slot, self.park_record
        return encode(fields)

    @classmethod
    def from_bytes(cls, data: bytes) -> Head:
        raw = decode(data)
        holder = None
        if raw.get("h") is not None:
            holder = Holder(str(raw["h"]), float(raw["x"]), float(raw["c"]))
        return cls(
            int(raw["e"]),
            int(raw["f"]),
            raw.get("s"),
            raw.get("r"),
            raw.get("s2"),
            raw.get("r2"),
            holder,
            raw.get("p"),
            raw.get("pr"),
        )

    def inline(self) -> list[tuple[str, bytes]]:
        """The steps this head carries, oldest first."""
        steps = []
        if self.prior_slot is not None and self.prior_record is not None:
            steps.append((self.prior_slot, self.prior_record))
        if self.slot is not None and self.record is not None:
            steps.append((self.slot, self.record))
        return steps

    def rotated(self, epoch: int) -> bytes:
        """This head under a new epoch, held by nobody: its steps travel with it, unwritten
        or not."""
        return replace(self, epoch=epoch, holder=None).to_bytes()

    def held(self, epoch: int, holder: Holder) -> bytes:
        """This head claimed by ``holder`` on ``epoch`` (an acquire, a takeover, a renewal);
        its steps travel with it."""
        return replace(self, epoch=epoch, holder=holder).to_bytes()

    def released(self) -> bytes:
        """This head on the same epoch with no holder: the run parked or ended."""
        return replace(self, holder=None).to_bytes()

    def with_step(self, slot: str, record: bytes, prior: Unwritten | None = None) -> bytes:
        """The head after a step, held as before; ``prior`` (the step before, not known to be
        written out yet) rides along while its write-out is in flight. A step at or after
        the parked slot ends the park (the parked step is done: top-level slots sort in step
        order), so the pending record no longer costs the head its room."""
        done = self.park_slot is not None and keys.top_slot(slot) >= self.park_slot
        return replace(
            self,
            slot=slot,
            record=record,
            prior_slot=None if prior is None else prior.slot,
            prior_record=None if prior is None else prior.record,
            park_slot=None if done else self.park_slot,
            park_record=None if done else self.park_record,
        ).to_bytes()

    def parked(self, slot: str, pending: bytes) -> bytes:
        """The head after the run parked its top-level step ``slot`` on ``pending`` (layout
        4): held as before, its steps unchanged."""
        return replace(self, park_slot=slot, park_record=pending).to_bytes()

    def park(self) -> tuple[str, bytes] | None:
        """The pending record the head carries, with its slot, if any."""
        if self.park_slot is None or self.park_record is None:
            return None
        return self.park_slot, self.park_record


def pairs(record: bytes, prior: bytes) -> bool:
    """Whether two op records fit in one head within one write unit (as one record does)."""
    return len(record) + len(prior) <= INLINE


def holder_record(holder_item: bytes | None, head: bytes | None) -> dict[str, Any] | None:
    """Who holds a run, from its owner records as read: the holder item (layouts 1 and 2)
    or the holder its head carries (layout 3); None when nobody does."""
    if holder_item is not None:
        record: dict[str, Any] = decode(holder_item)
        return record
    if head is None:
        return None
    parsed = Head.from_bytes(head)
    return None if parsed.holder is None else parsed.holder.record(parsed.epoch)


def fresh_head(epoch: int) -> bytes:
    """The head a run starts with: its floor is the epoch it starts on."""
    return Head(epoch, epoch).to_bytes()


def reference(record: bytes, epoch: int) -> tuple[str, bytes]:
    """The digest a large record is stored under, and the small op record naming it."""
    digest = hashlib.sha256(record).hexdigest()[:32]
    return digest, OpRecord(reference=digest, fence_epoch=epoch).to_bytes()


def resolve(ops: dict[str, OpRecord], blobs: dict[str, bytes], what: str) -> None:
    """Replace each op record that names a blob by the record the blob holds. The blob was
    put before the head that committed its reference, so it is there; an orphan blob (its
    head never landed) is named by nothing."""
    for slot, record in ops.items():
        digest = record.reference
        if digest is None:
            continue
        blob = blobs.get(f"{slot}#{digest}")
        if blob is None:
            raise StorageError(
                f"step {slot} of {what} names a record that is not stored; the store was "
                "changed outside the engine (restore it from a backup)"
            )
        ops[slot] = OpRecord.from_map(decode_record(blob, f"step {slot} of {what}"))


def tombstone(epoch: int) -> bytes:
    return OpRecord(tombstone=True, fence_epoch=epoch).to_bytes()


@dataclass(frozen=True, slots=True)
class Unwritten:
    """The head's inline step, not (yet) in its own item: the owner writes it out before its
    next write. ``expected`` is what the slot held when read (None: nothing)."""

    slot: str
    record: bytes
    expected: bytes | None

    @property
    def epoch(self) -> int:
        return int(OpRecord.from_map(decode(self.record)).fence_epoch or 0)


def is_void(record: OpRecord, floor: int) -> bool:
    """A tombstone, or a record written out by an owner of an earlier run of this id."""
    if record.tombstone:
        return True
    stamped = record.fence_epoch
    return stamped is not None and int(stamped) < floor


def settle(
    head_bytes: bytes, ops: dict[str, OpRecord], replayed: dict[str, bytes]
) -> tuple[dict[str, bytes], tuple[Unwritten, ...]]:
    """Apply the reader rule to a partition's op records (``ops`` by slot, their bytes in
    ``replayed`` by sort key); returns the void items' bytes by slot, and the inline steps
    that still have to be written out, oldest first. Each inline step (the head carries one,
    or two while a write-out is in flight) follows the same rule."""
    head = Head.from_bytes(head_bytes)
    void: dict[str, bytes] = {}
    for slot in [slot for slot, record in ops.items() if is_void(record, head.floor)]:
        del ops[slot]
        void[slot] = replayed.pop(keys.OP_PREFIX + slot)
    unwritten: list[Unwritten] = []
    for slot, inline in head.inline():
        record = OpRecord.from_map(decode(inline))
        sort = keys.OP_PREFIX + slot
        stored = replayed.get(sort)
        rival = void.get(slot) or stored
        if rival is not None and _outranks(OpRecord.from_map(decode(rival)), record):
            # Forgotten by a retry after this head's step was committed (a tombstone), and
            # perhaps committed again since by a later owner: the slot's item is newer.
            continue
        ops[slot] = record
        replayed[sort] = inline
        if stored != inline:
            unwritten.append(Unwritten(slot, inline, rival))
    return void, tuple(unwritten)


def _outranks(item: OpRecord, record: OpRecord) -> bool:
    """Whether the slot's item was written after the head's step: stamped by a later owner
    (only a retry's tombstone lets a slot be written again, under a newer epoch)."""
    return int(item.fence_epoch or 0) > int(record.fence_epoch or 0)
