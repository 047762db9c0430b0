"""What a workflow-lease engine holds: its claims, and the claim writes every part shares.

A claim is the engine's ownership of one workflow: a stored holder record and the epoch
its writes are fenced on (docs/decisions/0004-workflow-lease.md). ``ClaimRegistry`` keeps the
claims this engine holds and builds, takes and drops them; ``Takeover`` (maintenance) and
``WorkflowLease`` (the fence the engine talks to) build on it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import NamedTuple

from weft_serverless.codec import encode
from weft_serverless.engine.ownership.base import (
    Fragment,
    OwnerHost,
    Ownership,
    Timing,
    pack_epoch,
    unpack_epoch,
)
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.engine.persistence.run_head import Head, Holder, Unwritten, fresh_head
from weft_serverless.engine.process.telemetry import warn
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put
from weft_serverless.storage.keys.shards import ShardLayout

COOLDOWN_CAP_MULTIPLIER = 4


@dataclass(slots=True)
class Claim:
    """What this engine holds on one workflow.

    ``lock`` serialises everything that reads or rewrites the stored holder against
    ``holder_bytes`` (renewal on a heartbeat or background thread, the wake check, release),
    so the bytes remembered here always equal the bytes stored while the claim is registered.
    ``landed`` is False while the batch that acquires the claim (a start or resume) has not
    committed yet: there is no stored holder to renew until it has. ``head`` is the run's head
    as this claim last wrote it (None: the run has none and commits as before, ADR 0037), and
    ``unwritten`` the inline step this claim still has to write out. On a store of layout 3
    the holder is part of the head: ``holder_bytes`` is unused, and the stored head equal to
    ``head`` is what proves the claim still ours (ADR 0056).
    """

    epoch_bytes: bytes
    holder_bytes: bytes
    expires_at: float
    renewed_at: float
    driving: bool = False
    landed: bool = False
    # Layout 3 on: the start or resume batch carrying this claim just landed and no wake has
    # used it yet. The first wake drives without reading the head back: the drive's read of
    # the partition carries the head, and ``confirm_history`` refuses one not of this epoch.
    fresh: bool = False
    # Layout 4 (ADR 0059): a wake that found the run free drives it without writing a claim.
    # ``head`` is then the head as read (no holder), and ``deferred`` the one plain step the
    # drive has committed in memory only: it lands in the one conditional put of the head
    # that ends the drive, or in the claim the drive writes before anything else.
    lazy: bool = False
    deferred: Unwritten | None = None
    awaiting: frozenset[str] = frozenset()
    head: bytes | None = None
    unwritten: tuple[Unwritten, ...] = ()
    sending: tuple[Unwritten, Future[None]] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Serialises the head and its write-out (a heartbeat's commit flushes from its thread): a
    # write-out in flight is waited for under it before anything relies on it.
    writes: threading.RLock = field(default_factory=threading.RLock)


class OwnerRecords(NamedTuple):
    """A run's stored owner records, as one read of its ``owner#`` items found them."""

    epoch: bytes | None
    holder: bytes | None
    head: bytes | None


def current_epoch(owner: OwnerRecords) -> int:
    """The run's epoch as read: its head's, when it has one (claims move only the head)."""
    return (
        Head.from_bytes(owner.head).epoch if owner.head is not None else unpack_epoch(owner.epoch)
    )


def rotation(
    workflow_id: str, owner: OwnerRecords, *, epoch_item: bool = True
) -> tuple[list[Condition], list[Op]]:
    """Epoch + 1 on the records read. A run with a head is fenced by its head alone: the head
    is rewritten with the new epoch, its newest step carried over, and the epoch item is
    rewritten too only when ``epoch_item`` (a move that may end in a purge keeps it the
    highest epoch the id has had, for a new run of the id to start above). A run without a
    head is fenced by its epoch item. Every claim and every fencing-out goes through here."""
    epoch = current_epoch(owner) + 1
    conditions: list[Condition] = []
    ops: list[Op] = []
    if owner.head is None or epoch_item:
        epoch_key = keys.owner_epoch_key(workflow_id)
        conditions.append(Condition(epoch_key, owner.epoch))
        ops.append(Put(epoch_key, pack_epoch(epoch)))
    if owner.head is not None:
        head_key = keys.owner_head_key(workflow_id)
        conditions.append(Condition(head_key, owner.head))
        ops.append(Put(head_key, Head.from_bytes(owner.head).rotated(epoch)))
    return conditions, ops


class ClaimRegistry(Ownership):
    """The claims this engine holds, by workflow id, and how one is made, taken and dropped."""

    def __init__(self, host: OwnerHost, timing: Timing) -> None:
        super().__init__(host)
        self.timing = timing
        self.heads = False  # new runs get a head: the store's marker says layout 2 (bootstrap)
        # Layout 3: the holder is part of the head; no holder item, no claims-index entry.
        self.inline_holder = False
        # Layout 4: a top-level park is carried in the head too (ADR 0058).
        self.inline_park = False
        self.claims: dict[str, Claim] = {}
        self._cooldown: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        # The partition a wake read before its claim landed, for the drive (ADR 0058).
        self._prefetched: dict[str, tuple[Claim, bytes, list[tuple[str, bytes]]]] = {}

    @property
    def renew_interval(self) -> float:
        return self.timing.renew_interval

    def _holder(self, epoch: int, claimed_at: float | None = None) -> tuple[bytes, float]:
        now = self.host.now()
        expires = now + self.timing.ttl
        record = {
            "engine_id": self.host.engine_id,
            "epoch": epoch,
            "expires_at": expires,
            "claimed_at": now if claimed_at is None else claimed_at,
        }
        return encode(record), expires

    def _claim_fragment(
        self,
        workflow_id: str,
        owner: OwnerRecords,
        state_bytes: bytes | None = None,
        *,
        starting: bool = False,
    ) -> tuple[Fragment, Claim]:
        """Acquire (holder absent) or take over (holder stale): epoch := read + 1.

        ``state_bytes`` (the running state just read) makes the claim conditional on the run
        not having changed status since, so no claim can land on a run that ended meanwhile
        (a terminal run holds no claim). Lifecycle batches pass none: they condition on the
        state themselves. On a store of layout 2 a run without a head gets a fresh one with its
        first claim. ``starting``: the batch starts the run, so any head left by a purged run
        of the id is replaced (the epoch condition already fences its writers out).
        """
        read = owner._replace(head=None) if starting else owner
        conditions, ops = rotation(workflow_id, read, epoch_item=False)
        new_epoch = current_epoch(read) + 1
        if self.inline_holder:
            return self._claim_on_head(workflow_id, read, new_epoch, conditions, ops)
        head = None
        if read.head is not None:
            head = Head.from_bytes(read.head).rotated(new_epoch)
        elif self.heads:  # a start, or the first claim of a run started unclaimed (pending)
            head = fresh_head(new_epoch)
            ops.append(Put(keys.owner_head_key(workflow_id), head))
        holder, expires = self._holder(new_epoch)
        state_fence = (
            [] if state_bytes is None else [Condition(keys.state_key(workflow_id), state_bytes)]
        )
        fragment = Fragment(
            conditions=[
                Condition(keys.owner_holder_key(workflow_id), owner.holder),
                *conditions,
                *state_fence,
            ],
            ops=[
                *ops,
                Put(keys.owner_holder_key(workflow_id), holder),
                *claim_index_ops(self.host.shards, workflow_id, self.host.engine_id),
            ],
        )
        claim = Claim(pack_epoch(new_epoch), holder, expires, self.host.now(), head=head)
        return fragment, claim

    def _claim_on_head(
        self,
        workflow_id: str,
        read: OwnerRecords,
        epoch: int,
        conditions: list[Condition],
        ops: list[Op],
    ) -> tuple[Fragment, Claim]:
        """The claim of layout 3: the head, rewritten with epoch + 1 and this engine as its
        holder, on the head bytes read (a run without one gets its first, on the epoch item).

        No state condition: every status change of a run rewrites its head (a claim, a
        rotation, the terminal commit clearing its holder), so a claim whose head was read
        before the run's state was read as running cannot land on a run that changed since.
        """
        now = self.host.now()
        holder = Holder(self.host.engine_id, now + self.timing.ttl, now)
        key = keys.owner_head_key(workflow_id)
        base = Head.from_bytes(read.head) if read.head is not None else Head(epoch, epoch)
        head = base.held(epoch, holder)
        ops = [*(op for op in ops if op.key != key), Put(key, head)]
        claim = Claim(pack_epoch(epoch), head, holder.expires_at, now, head=head)
        return Fragment(conditions=conditions, ops=ops), claim

    def _try_claim(
        self,
        workflow_id: str,
        owner: OwnerRecords,
        outcome: str,
        state_bytes: bytes | None,
    ) -> bool:
        fragment, claim = self._claim_fragment(workflow_id, owner, state_bytes)
        if not self.host.write(fragment.conditions, fragment.ops):
            self.host.metrics.incr("claim_attempts.lost_race")
            return False
        claim.landed = True
        with self._lock:
            self.claims[workflow_id] = claim
        self._cooldown.pop(workflow_id, None)
        self.host.metrics.incr(f"claim_attempts.{outcome}")
        return True

    def _read_owner(self, workflow_id: str) -> OwnerRecords:
        found = dict(self.host.storage.scan(keys.workflow_partition(workflow_id), "owner#"))
        return OwnerRecords(
            found.get(keys.OWNER_EPOCH), found.get(keys.OWNER_HOLDER), found.get(keys.OWNER_HEAD)
        )

    def _status(self, workflow_id: str) -> WorkflowState | None:
        data = self.host.storage.get(keys.state_key(workflow_id))
        return None if data is None else WorkflowState.from_bytes(data)

    def _drop(self, workflow_id: str, claim: Claim | None = None) -> None:
        """Forget the claim on ``workflow_id``; with ``claim``, only if it is that one."""
        with self._lock:
            if claim is None or self.claims.get(workflow_id) is claim:
                self.claims.pop(workflow_id, None)

    def _bump_cooldown(self, workflow_id: str) -> None:
        _, previous = self._cooldown.get(workflow_id, (0.0, 0.0))
        delay = min(
            previous * 2 if previous else self.timing.renew_interval,
            self.timing.ttl * COOLDOWN_CAP_MULTIPLIER,
        )
        self._cooldown[workflow_id] = (self.host.now() + delay, delay)

    def deposed(self, workflow_id: str, claim: Claim | None = None) -> None:
        """Stop driving ``workflow_id``; with ``claim``, only if that claim is still the one
        registered (a renewal refused for a claim replaced meanwhile deposes nothing)."""
        if claim is not None and self.claims.get(workflow_id) is not claim:
            return
        self._drop(workflow_id, claim)
        self._bump_cooldown(workflow_id)
        self.host.metrics.incr("claim_attempts.deposed")
        warn(WorkflowClaimLost, f"workflow {workflow_id!r}: claim lost, stopped driving it")


def claim_index_ops(layout: ShardLayout, workflow_id: str, engine_id: str) -> list[Op]:
    """The claim's index entry put under the counts written now and, while the counts
    change, deleted under the other layout, so a claim is never indexed twice."""
    written, *others = keys.claim_index_keys(layout, workflow_id)
    return [Put(written, encode({"e": engine_id})), *(Delete(key) for key in others)]


def release_ops(layout: ShardLayout, workflow_id: str) -> list[Op]:
    """The holder and the claim's index entry deleted, under every layout it may sit in."""
    return [
        Delete(keys.owner_holder_key(workflow_id)),
        *(Delete(key) for key in keys.claim_index_keys(layout, workflow_id)),
    ]
