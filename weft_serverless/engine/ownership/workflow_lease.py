"""``ownership="workflow-lease"``: one fenced owner per workflow, many engines per store.

Per workflow, an epoch (8-byte counter, never deleted) and a holder record
``{engine_id, epoch, expires_at, claimed_at}`` compared as opaque bytes. Every write of the
owner carries the epoch as a condition, so a deposed owner can never land one; the holder's
expiry only decides when another engine may take over (docs/decisions/0004-workflow-lease.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.engine.ownership.base import (
    INLINE_HOLDER_LAYOUTS,
    LAYOUTS,
    NO_LOCK,
    PARK_LAYOUT,
    EngineDeposedError,
    Fragment,
    Mode,
    Verdict,
    establish_mode,
    head_holder,
    pack_epoch,
    stored_owner,
    unpack_epoch,
)
from weft_serverless.engine.ownership.claims import Claim, OwnerRecords, release_ops, rotation
from weft_serverless.engine.ownership.in_flight import Overlap
from weft_serverless.engine.ownership.takeover import Takeover
from weft_serverless.engine.persistence.records import (
    RUNNING,
    SUSPENDED,
    TERMINAL,
    History,
    WorkflowState,
)
from weft_serverless.engine.persistence.run_head import Head, Unwritten, pairs
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.process.telemetry import warn
from weft_serverless.errors import (
    StorageError,
    WorkflowClaimUnavailableError,
    WorkflowWakeDiscarded,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put


class WorkflowLease(Takeover):
    mode: Mode = "workflow-lease"

    overlap: Overlap | None = None
    """Sends a write-out beside the head put (ADR 0057); None where requests do not overlap."""

    def bootstrap(self) -> None:
        layout = establish_mode(self.host, self.mode)
        self.heads = layout in LAYOUTS
        self.inline_holder = layout in INLINE_HOLDER_LAYOUTS
        self.inline_park = layout == PARK_LAYOUT
        if self.host.storage.capabilities().concurrent_requests and self.overlap is None:
            self.overlap = Overlap()  # its threads start at the first write-out, not here

    def needs_claim(self, workflow_id: str) -> bool:
        return workflow_id not in self.claims

    def conditions(self, workflow_id: str) -> list[Condition]:
        claim = self.claims.get(workflow_id)
        if claim is None or not self._held(workflow_id, claim):
            raise EngineDeposedError(workflow_id)
        if claim.head is not None:  # the head moves with the epoch and with each plain step
            return [Condition(keys.owner_head_key(workflow_id), claim.head)]
        return [Condition(keys.owner_epoch_key(workflow_id), claim.epoch_bytes)]

    def exclusive(self, workflow_id: str) -> AbstractContextManager[object]:
        claim = self.claims.get(workflow_id)
        return NO_LOCK if claim is None else claim.writes

    def confirm_history(self, workflow_id: str, history: History) -> None:
        """The epoch read with the history must be this claim's own.

        The wake check proves ownership when the drive was decided; the history is read after
        it, and between the two another engine may have suspended and resumed the run (epoch
        + 2; right after this engine's own acquire, say). The history read carries the stored
        epoch for free: a drive on an epoch that is not ours runs nothing (an activity run
        there would be fenced out at its commit, and run again by the owner).
        """
        claim = self.claims.get(workflow_id)
        if claim is None:
            raise EngineDeposedError(workflow_id)
        head = history.head
        if head is None:
            if history.owner_epoch != claim.epoch_bytes:
                raise EngineDeposedError(workflow_id)
            return
        # A run with a head carries its epoch there (claims move only the head). Read with
        # the epoch that is ours, it is the head this claim last wrote: only this claim
        # writes a head on it (after a lost reply, the one that landed).
        if Head.from_bytes(head).epoch != unpack_epoch(claim.epoch_bytes):
            raise EngineDeposedError(workflow_id)
        with claim.writes:
            if claim.head is not None and _renewed_since(head, claim.head):
                return  # a renewal landed after the read (layout 3): the claim's is newer
            sending = claim.sending
            claim.head, claim.unwritten = (
                head,
                tuple(
                    sending[0] if sending is not None and _same(sending[0], step) else step
                    for step in history.unwritten
                ),
            )  # a write-out still in flight from this claim's last step is waited for, not resent

    def commit_epoch(self, workflow_id: str) -> int | None:
        claim = self.claims.get(workflow_id)
        if claim is None:
            raise EngineDeposedError(workflow_id)
        return None if claim.head is None else unpack_epoch(claim.epoch_bytes)

    def commit_on_head(
        self,
        workflow_id: str,
        slot: str,
        record: bytes,
        expected: bytes | None,
        blob: Put | None = None,
    ) -> bool:
        """One conditional put of the head, carrying the step inline, with the previous
        inline step written out: the step's whole commit (ADR 0037).

        On a store whose batches cost one commit however many items they hold (SQLite), the
        write-out, the blob and the head put go as one batch under both their conditions
        (ADR 0051): one commit per step where the separate writes cost three. The stored
        items are the same as the separate writes leave, so the reader rule and the layout
        do not change. Refused, the batch lands nothing, and the step is committed as on
        any other store.

        On a store where each request is a round trip (DynamoDB), the write-out starts as
        soon as the head that carries its step landed, and when both records fit in one head
        the next head carries the step before too, so its put need not wait for the
        write-out: the two travel side by side and the step waits for one round trip (ADR
        0057). The step ends when both have answered.
        """
        claim = self.claims.get(workflow_id)
        if claim is None or claim.head is None:
            raise EngineDeposedError(workflow_id)
        if claim.lazy:
            with claim.writes:
                if claim.lazy and claim.deferred is None and blob is None:
                    # The drive's first step: it lands with the put that ends the drive,
                    # or in the claim written before anything else (ADR 0059).
                    claim.deferred = Unwritten(slot, record, expected)
                    return True
            if not self._held(workflow_id, claim):
                return False
        key = keys.owner_head_key(workflow_id)
        if self.host.storage.capabilities().cheap_multi_item_batch:
            with claim.writes:
                new = Head.from_bytes(claim.head).with_step(slot, record)
                conditions, ops = _folded(workflow_id, claim.unwritten, blob)
                conditions.append(Condition(key, claim.head))
                ops.append(Put(key, new))
                if self.host.write(conditions, ops):
                    claim.head, claim.unwritten = new, (Unwritten(slot, record, expected),)
                    return True
                if not claim.unwritten:  # the head alone was conditioned: it moved
                    return False
        with claim.writes:
            prior = self._rider(claim, slot, record)
            if prior is None:
                self.flush(workflow_id)
            else:
                self._send(workflow_id, claim, prior)
            if blob is not None:  # a plain put: landing without its head, it is named by nothing
                self.host.write([], [blob])
            new = Head.from_bytes(claim.head).with_step(slot, record, prior)
            landed = self.host.write([Condition(key, claim.head)], [Put(key, new)])
            if prior is not None:  # the write-out beside the head put has answered too
                self.flush(workflow_id)
            if not landed:
                return False
            step = Unwritten(slot, record, expected)
            claim.head, claim.unwritten = new, (step,)
            if self.overlap is not None:  # overlaps the next step's own work
                self._send(workflow_id, claim, step)
        return True

    def parks_on_head(self, workflow_id: str) -> bool:
        """Layout 4, where a transaction bills each item: on a store whose batch is one
        commit however many items it holds (SQLite), the park stays one batch (ADR 0051)."""
        if not self.inline_park or self.host.storage.capabilities().cheap_multi_item_batch:
            return False
        claim = self.claims.get(workflow_id)
        return claim is not None and claim.head is not None

    def park_on_head(self, workflow_id: str, slot: str, pending: bytes) -> bool:
        """Park the run's top-level step ``slot`` on ``pending``: one conditional put of the
        head, carrying the pending record, on the bytes this claim last wrote (layout 4,
        ADR 0058). The steps still inline are written out first, as before any write of the
        run; the head keeps its holder (the claim is released when the drive ends)."""
        claim = self.claims.get(workflow_id)
        if claim is None or claim.head is None:
            raise EngineDeposedError(workflow_id)
        key = keys.owner_head_key(workflow_id)
        with claim.writes:
            if claim.lazy:  # no claim written: the park carries the drive's step (ADR 0059)
                return self._put_deferred(workflow_id, claim, (slot, pending))
            self.flush(workflow_id)
            new = Head.from_bytes(claim.head).parked(slot, pending)
            fence = [Condition(key, claim.head)]  # the park is fenced as a plain step is
            if not self.host.write(fence, [Put(key, new)]):
                return False
            claim.head = new
        return True

    def commit_deferred(self, workflow_id: str) -> bool:
        """End a drive that wrote no claim: its deferred step, if any, lands in one
        conditional put of the head on the bytes the wake read (no holder, nothing committed
        since), the holder left free (ADR 0059). False when the head moved meanwhile: nothing
        of the drive landed."""
        claim = self.claims.get(workflow_id)
        if claim is None or not claim.lazy or claim.deferred is None:
            return True
        with claim.writes:
            return self._put_deferred(workflow_id, claim, None)

    def _put_deferred(self, workflow_id: str, claim: Claim, park: tuple[str, bytes] | None) -> bool:
        """The one head put of a drive that claimed nothing: on the head as read, on the
        same epoch, with no holder, carrying the deferred step and the park, if any. The
        steps the head still carries are written out first, as before any write of the run
        (the new step takes their place). Any claim moves the epoch and any commit is made
        on a head naming its holder, so the put lands only on a run nobody wrote since."""
        head, step = claim.head, claim.deferred
        if head is None:
            raise EngineDeposedError(workflow_id)
        new = Head.from_bytes(head)
        if step is not None:
            self.flush(workflow_id)
            new = Head.from_bytes(new.with_step(step.slot, step.record))
        data = new.to_bytes() if park is None else new.parked(*park)
        key = keys.owner_head_key(workflow_id)
        if not self.host.write([Condition(key, head)], [Put(key, data)]):
            return False
        claim.head, claim.deferred = data, None
        if step is not None:
            claim.unwritten = (step,)  # for the next owner to write out, as a release leaves it
        return True

    def _held(self, workflow_id: str, claim: Claim) -> bool:
        """Write the claim a lazy drive put off, before the drive writes anything else or
        runs a side effect: today's claim (epoch + 1, this engine the holder) on the head as
        read, then the deferred step committed on it. False when the head moved since it was
        read: the drive ran on a history that may be stale, so nothing of it may land."""
        if not claim.lazy:
            return True
        with claim.writes:
            if not claim.lazy:
                return True
            fragment, held = self._claim_fragment(workflow_id, OwnerRecords(None, None, claim.head))
            if not self.host.write(fragment.conditions, fragment.ops):
                self.host.metrics.incr("claim_attempts.lost_race")
                return False
            self.host.metrics.incr("claim_attempts.acquired")
            claim.epoch_bytes, claim.holder_bytes = held.epoch_bytes, held.holder_bytes
            claim.expires_at, claim.renewed_at = held.expires_at, held.renewed_at
            claim.head, claim.landed, claim.lazy = held.head, True, False
            step, claim.deferred = claim.deferred, None
            if step is None:
                return True
            return self.commit_on_head(workflow_id, step.slot, step.record, step.expected)

    def _rider(self, claim: Claim, slot: str, record: bytes) -> Unwritten | None:
        """The unwritten step the next head may carry beside the new one, so that its
        write-out need not land first: only where requests overlap, and only when both
        records fit in one head."""
        if self.overlap is None or len(claim.unwritten) != 1:
            return None
        step = claim.unwritten[0]
        return step if step.slot != slot and pairs(record, step.record) else None

    def _send(self, workflow_id: str, claim: Claim, step: Unwritten) -> None:
        """Start the write-out of ``step`` on its own thread, unless it is in flight already;
        ``flush`` waits for it."""
        if self.overlap is None or (claim.sending is not None and claim.sending[0] is step):
            return
        claim.sending = (step, self.overlap.send(lambda: self._write_out(workflow_id, step)))

    def flush(self, workflow_id: str) -> None:
        """Write the inline steps out to their own items, before anything else is written:
        a slot is put on what it held when read, so a write-out never replaces a newer item
        (a tombstone, or a later owner's copy); the same bytes already there are success. A
        write-out in flight is waited for; failed, it is sent again here."""
        claim = self.claims.get(workflow_id)
        if claim is None or not claim.unwritten:
            return
        with claim.writes:
            while claim.unwritten:
                step, sending = claim.unwritten[0], claim.sending
                if sending is not None and sending[0] is step:
                    claim.sending = None
                    if not _answered(sending[1]):
                        self._write_out(workflow_id, step)
                else:
                    self._write_out(workflow_id, step)
                claim.unwritten = claim.unwritten[1:]

    def _write_out(self, workflow_id: str, step: Unwritten) -> None:
        key = keys.op_key(workflow_id, step.slot)
        expected = step.expected
        for _ in range(WRITE_OUT_ATTEMPTS):
            if self.host.write([Condition(key, expected)], [Put(key, step.record)]):
                return
            found = self.host.storage.get(key)
            if found == step.record or (found is not None and _newer(found, step)):
                return
            expected = found
        raise StorageError(
            f"step {step.slot} of workflow {workflow_id!r} could not be written out "
            "(its slot kept changing); the next drive writes it out again"
        )

    def before_activity(self, workflow_id: str) -> None:
        """Run an activity only on a claim this engine's clock says is live.

        A claim's expiry is stamped when its batch is built, and renewals keep it at least
        two renew intervals ahead; a claim with less than one interval left missed its
        renewals (the engine stalled, say between building a start batch and its landing).
        Another engine may take it over at any moment, run the activity again and fence this
        drive's result out: so the claim is renewed first, on the holder this engine stored,
        and a refused renewal (the claim is already someone else's) runs nothing. A healthy
        claim costs no request here.
        """
        claim = self.claims.get(workflow_id)
        if claim is None or not self._held(workflow_id, claim):
            raise EngineDeposedError(workflow_id)
        if self.host.now() < claim.expires_at - self.timing.renew_interval:
            return
        if (
            self._renew_one(workflow_id, claim) is False
            or self.claims.get(workflow_id) is not claim
        ):
            raise EngineDeposedError(workflow_id)

    def on_lost_commit(self, workflow_id: str) -> None:
        claim = self.claims.get(workflow_id)
        if claim is not None and claim.head is not None:
            head = self.host.storage.get(keys.owner_head_key(workflow_id))
            if head is None or Head.from_bytes(head).epoch != unpack_epoch(claim.epoch_bytes):
                raise EngineDeposedError(workflow_id)
            return
        current = self.host.storage.get(keys.owner_epoch_key(workflow_id))
        if claim is None or current != claim.epoch_bytes:
            raise EngineDeposedError(workflow_id)

    def start_fragment(self, workflow_id: str, epoch: bytes | None = None) -> Fragment:
        owner = OwnerRecords(epoch, None, None)
        fragment, claim = self._claim_fragment(workflow_id, owner, starting=True)
        self.host.metrics.incr("claim_attempts.acquired")  # undone by forget_start if refused
        with self._lock:
            self.claims[workflow_id] = claim
        return fragment

    def forget_start(self, workflow_id: str) -> None:
        self._drop(workflow_id)
        self.host.metrics.incr("claim_attempts.acquired", -1)
        self.host.metrics.incr("claim_attempts.lost_race")

    def surviving_epoch(self, workflow_id: str) -> bytes | None:
        return self.host.storage.get(keys.owner_epoch_key(workflow_id))

    def claim_landed(self, workflow_id: str) -> None:
        claim = self.claims.get(workflow_id)
        if claim is not None:
            claim.landed = True
            claim.fresh = self.inline_holder and claim.head is not None

    @contextmanager
    def release_for_terminal(self, workflow_id: str) -> Iterator[Fragment]:
        claim = self.claims.get(workflow_id)
        if claim is None or not self._held(workflow_id, claim):
            raise EngineDeposedError(workflow_id)
        if self.inline_holder:
            # The head, released, is the terminal batch's own write (its fence is the head
            # as this claim left it): the run's end rewrites its head, so no claim read
            # before the end can land after it. Held still, so no step moves the head.
            with claim.lock, claim.writes:
                if claim.head is None:
                    raise EngineDeposedError(workflow_id)
                released = Head.from_bytes(claim.head).released()
                yield Fragment(ops=[Put(keys.owner_head_key(workflow_id), released)])
                self._drop(workflow_id, claim)
            return
        with claim.lock:
            yield Fragment(
                conditions=[Condition(keys.owner_holder_key(workflow_id), claim.holder_bytes)],
                ops=release_ops(self.host.shards, workflow_id),
            )
            # Still under the lock: a renewal waiting for it must find the claim gone, not
            # try to renew a holder the terminal commit just deleted.
            self._drop(workflow_id, claim)

    def rotate_fragment(self, workflow_id: str) -> Fragment:
        """External terminal transition: epoch + 1 so a still-running owner is fenced out."""
        conditions, ops = rotation(workflow_id, self._read_owner(workflow_id))
        self._drop(workflow_id)
        if self.inline_holder:  # the rotated head holds no holder: the release is in it
            return Fragment(conditions=conditions, ops=ops)
        return Fragment(
            conditions=conditions, ops=[*ops, *release_ops(self.host.shards, workflow_id)]
        )

    def resume_fragment(self, workflow_id: str) -> Fragment:
        """Claim folded into a move back to running from a status no engine may hold a claim
        in (pending, suspended, failed; the batch conditions on that state): whatever holder
        is stored is a leftover, so the claim replaces it on the bytes read, and epoch + 1
        fences out whoever wrote it. A leftover can therefore never block the transition."""
        fragment, claim = self._claim_fragment(workflow_id, self._read_owner(workflow_id))
        with self._lock:
            self.claims[workflow_id] = claim
        return fragment

    def prepare_wake(self, workflow_id: str, kind: str, *, explicit: bool = False) -> Verdict:
        """Whether this engine may drive the workflow now, claiming it if nobody holds it.

        Every wake re-reads the holder, even right after this engine claimed the workflow:
        between the claim and a queued drive another engine may have suspended, resumed and
        released it, and only the stored holder (engine id AND epoch) says who owns it now.
        Only a running run is claimed, on its state bytes: a pending run is activated by its
        delayed start alone, and a run that ended between the reads is left alone.
        """
        if self.inline_holder:
            return self._prepare_wake_on_head(workflow_id, kind, explicit)
        claim = self.claims.get(workflow_id)
        if claim is not None:
            with claim.lock:  # a renewal must not change the holder between read and compare
                holder = self.host.storage.get(keys.owner_holder_key(workflow_id))
                if holder == claim.holder_bytes and self.claims.get(workflow_id) is claim:
                    claim.landed = claim.driving = True  # the stored holder is this claim's
                    return "drive"
                self._drop(workflow_id, claim)
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake discarded, this engine no longer owns it",
            )
            return self._retain_or_collect(
                workflow_id, self._status(workflow_id), _decoded(holder), explicit
            )
        state_bytes = self.host.storage.get(keys.state_key(workflow_id))
        state = None if state_bytes is None else WorkflowState.from_bytes(state_bytes)
        if state is None or state.status != RUNNING:
            return "collect"
        if state.type not in self.host.workflow_types:
            return "retain"  # an engine that cannot run this type must not claim it
        owner = self._read_owner(workflow_id)
        if owner.holder is None and self._try_claim(workflow_id, owner, "acquired", state_bytes):
            self.claims[workflow_id].driving = True
            return "drive"
        if owner.holder is None:  # lost the acquire: the run may have ended meanwhile
            state = self._status(workflow_id)
        verdict = self._retain_or_collect(workflow_id, state, _decoded(owner.holder), explicit)
        if verdict == "retain":
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake left to the engine that holds it",
                logging.INFO,  # routine in a fleet: the owner acts on it
            )
        return verdict

    def _prepare_wake_on_head(self, workflow_id: str, kind: str, explicit: bool) -> Verdict:
        """``prepare_wake`` on layout 3, where the holder is part of the head.

        A claim this engine holds is confirmed by the stored head being the one it last
        wrote. Otherwise the head is read BEFORE the state: a run seen running after its
        head was read cannot have changed status since without rewriting that head, so the
        claim (one conditional put on it) never lands on a run that ended. A holder whose
        claim expired (and whose grace passed) is taken over here: the wake that finds it is
        the durable timer every claimed drive leaves behind until it parks (ADR 0056), so no
        index of held claims is needed to find it.
        """
        claim = self.claims.get(workflow_id)
        if claim is not None:
            with claim.lock, claim.writes:
                if claim.fresh and self.claims.get(workflow_id) is claim:
                    # The first wake after the batch that carried the claim (a start): the
                    # head is read with the partition by the drive, which runs nothing on a
                    # head of another epoch (``confirm_history``; ADR 0058).
                    claim.fresh = False
                    claim.driving = True
                    return "drive"
                head = self.host.storage.get(keys.owner_head_key(workflow_id))
                ours = self.claims.get(workflow_id) is claim
                if ours and head is not None and head == claim.head:
                    claim.landed = claim.driving = True  # the stored head is this claim's
                    return "drive"
                self._drop(workflow_id, claim)
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake discarded by its claim, which this "
                "engine no longer holds; it is decided afresh",
            )
        rows = list(self.host.storage.scan(keys.workflow_partition(workflow_id)))
        found = dict(rows)
        owner = OwnerRecords(
            found.get(keys.OWNER_EPOCH), found.get(keys.OWNER_HOLDER), found.get(keys.OWNER_HEAD)
        )
        state_bytes = self.host.storage.get(keys.state_key(workflow_id))
        state = None if state_bytes is None else WorkflowState.from_bytes(state_bytes)
        if state is None or state.status != RUNNING:
            return "collect"
        if state.type not in self.host.workflow_types:
            return "retain"  # an engine that cannot run this type must not claim it
        holder = None if owner.head is None else head_holder(owner.head)
        now = self.host.now()
        outcome = "acquired"
        if holder is not None:
            outcome = "takeover"
            open_now = (
                self._open_to_takeover(holder, now)
                and now >= self._cooldown.get(workflow_id, (0.0, 0.0))[0]
            )
            if not open_now or not self.host.clock_guard.allows_takeover(
                f"workflow {workflow_id!r}", now
            ):
                return self._retained(workflow_id, kind, state, holder, explicit)
        elif (
            self._fires_lazily(explicit)
            and owner.head is not None
            and found.get(keys.STATE) == state_bytes
        ):
            # ADR 0059: the drive writes its claim only before a side effect or a write
            # its head put cannot carry; a fire that reaches its next wait claims nothing.
            lazy = Claim(
                pack_epoch(Head.from_bytes(owner.head).epoch),
                b"",
                now,
                now,
                driving=True,
                head=owner.head,
                lazy=True,
            )
            with self._lock:
                self.claims[workflow_id] = lazy
            self._prefetched[workflow_id] = (lazy, owner.head, rows)
            self.host.metrics.incr("claim_attempts.deferred")
            return "drive"
        if self._try_claim(workflow_id, owner, outcome, None):
            claim = self.claims[workflow_id]
            claim.driving = True
            if (
                holder is None
                and owner.head is not None  # a run without a head gets one with its claim
                and found.get(keys.STATE) == state_bytes
                and claim.head is not None
            ):
                self._prefetched[workflow_id] = (claim, claim.head, rows)
            return "drive"
        return self._retained(workflow_id, kind, self._status(workflow_id), None, explicit)

    def _fires_lazily(self, explicit: bool) -> bool:
        """Whether a wake that finds the run free drives it before claiming it (ADR 0059):
        on layout 4, where the head carries a park, for a wake nobody called by name, on a
        store where each write is a request of its own (on SQLite a batch is one commit
        however many items it holds, ADR 0051)."""
        return (
            self.inline_park
            and not explicit
            and not self.host.storage.capabilities().cheap_multi_item_batch
        )

    def prefetched(self, workflow_id: str) -> list[tuple[str, bytes]] | None:
        """The partition a wake read before its claim landed, as the drive's history (ADR
        0058): one Query where the wake read the owner items and the drive the partition.

        Only after an acquire (the head named no holder): no writer can have committed on
        the head that was read, since every commit of a run is fenced on a head naming its
        holder, so the claim landing on that head proves the rows read before it are the
        history. After a takeover the deposed holder may still have committed beside that
        head (a transaction checking it) between the read and the claim: the drive reads
        again. And only while the claim has written nothing since: its head is the one it
        landed. The state was read after the head, as an acquire requires, and must match
        the partition's copy. The head row becomes the claim's; a run read without a head (one
        started under mode ``none``) gets its head with the claim, and is read again."""
        found = self._prefetched.pop(workflow_id, None)
        if found is None:
            return None
        claim, head, rows = found
        if self.claims.get(workflow_id) is not claim or claim.head != head:
            return None
        return [(sort, head if sort == keys.OWNER_HEAD else value) for sort, value in rows]

    def _retained(
        self,
        workflow_id: str,
        kind: str,
        state: WorkflowState | None,
        holder: dict[str, Any] | None,
        explicit: bool,
    ) -> Verdict:
        verdict = self._retain_or_collect(workflow_id, state, holder, explicit)
        if verdict == "retain":
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake left to the engine that holds it",
                logging.INFO,
            )
        return verdict

    def _retain_or_collect(
        self,
        workflow_id: str,
        state: WorkflowState | None,
        holder: dict[str, Any] | None,
        explicit: bool,
    ) -> Verdict:
        """What to do with a wake this engine may not drive, from the records just read.

        Only a running run is anyone's to drive: any other is collected, even on an explicit
        call (there is no owner to name)."""
        if state is None or state.status != RUNNING:
            return "collect"
        if explicit:
            if holder is None:  # lost an acquire race just now: name the winner
                holder = stored_owner(self.host.storage, workflow_id)
            held_by = str(holder["engine_id"]) if holder is not None else "(none)"
            raise WorkflowClaimUnavailableError(workflow_id, held_by)
        return "retain"

    def after_drive(self, workflow_id: str, status: str | None, awaiting: frozenset[str]) -> None:
        """Forget the claim of a run that ended or left; keep it (not driving) otherwise.

        ``status`` is ``"error"`` when the drive raised: the stored holder is still ours, so
        the claim stays registered to be renewed or released, never silently leaked.
        """
        self._prefetched.pop(workflow_id, None)  # not taken: a drive that read nothing
        claim = self.claims.get(workflow_id)
        if claim is None:
            return
        if claim.lazy:  # it holds nothing: its step landed at the drive's end, or nothing did
            self._drop(workflow_id, claim)
            return
        if status is None or status in TERMINAL or status == SUSPENDED:
            self._drop(workflow_id)
            return
        claim.driving = False
        claim.awaiting = awaiting

    def release_parked(self, keep: Callable[[str], bool] | None = None) -> int:
        released = 0
        for workflow_id, claim in list(self.claims.items()):
            if claim.driving or (keep is not None and keep(workflow_id)):
                continue
            with claim.lock, claim.writes:
                if self.claims.get(workflow_id) is not claim:
                    continue
                if claim.lazy:  # nothing stored to release
                    self._drop(workflow_id, claim)
                    continue
                _settle_sending(claim)  # nothing of the run stays in flight past its release
                try:
                    self.host.write(*self._release(workflow_id, claim))
                    released += 1
                except StorageError:
                    pass
                self._drop(workflow_id, claim)
        return released

    def _release(self, workflow_id: str, claim: Claim) -> tuple[list[Condition], list[Op]]:
        """The write that lets a parked run's claim go, on what this claim stored: on layout
        3 its head put back with no holder (the newest step stays inline, for the next owner
        to write out), else the holder item and its index entry deleted."""
        if self.inline_holder and claim.head is not None:
            key = keys.owner_head_key(workflow_id)
            return [Condition(key, claim.head)], [Put(key, Head.from_bytes(claim.head).released())]
        holder = [Condition(keys.owner_holder_key(workflow_id), claim.holder_bytes)]
        return holder, release_ops(self.host.shards, workflow_id)

    def close(self) -> None:
        self.release_parked()
        if self.overlap is not None:
            self.overlap.close()

    def held_elsewhere(self, workflow_id: str) -> bool:
        record = stored_owner(self.host.storage, workflow_id)
        if record is None:
            return False
        return bool(
            record["engine_id"] != self.host.engine_id
            and not self._open_to_takeover(record, self.host.now())
        )

    def owner_of(self, workflow_id: str) -> dict[str, object] | None:
        return stored_owner(self.host.storage, workflow_id)


WRITE_OUT_ATTEMPTS = 3


def _renewed_since(read: bytes, held: bytes) -> bool:
    """Whether ``held`` is ``read`` renewed: the same epoch and step, a later expiry. Only
    renewals rewrite a head without a step on one epoch, so the history read before it is
    older than the head this claim holds (layout 3)."""
    before, after = Head.from_bytes(read), Head.from_bytes(held)
    return (
        before.holder is not None
        and after.holder is not None
        and (before.epoch, before.inline()) == (after.epoch, after.inline())
        and before.holder.expires_at < after.holder.expires_at
    )


def _decoded(holder: bytes | None) -> dict[str, Any] | None:
    """A holder item as read (layouts 1 and 2), decoded."""
    if holder is None:
        return None
    record: dict[str, Any] = decode(holder)
    return record


def _folded(
    workflow_id: str, steps: tuple[Unwritten, ...], blob: Put | None
) -> tuple[list[Condition], list[Op]]:
    """What a step's one batch writes before its head: the inline steps before it, written
    out on what their slots held when read (as ``flush`` writes them), and the blob the new
    step names (unconditioned, as it is put alone)."""
    conditions: list[Condition] = []
    ops: list[Op] = []
    for step in steps:
        item = keys.op_key(workflow_id, step.slot)
        conditions.append(Condition(item, step.expected))
        ops.append(Put(item, step.record))
    if blob is not None:
        ops.append(blob)
    return conditions, ops


def _answered(sending: Future[None]) -> bool:
    """Wait for a write-out in flight: True when it landed (or found its slot settled), False
    when it failed with a storage error, so the caller sends it again."""
    try:
        sending.result()
    except StorageError:
        return False
    return True


def _settle_sending(claim: Claim) -> None:
    """Wait for the claim's write-out in flight, if any: landed, its step needs no other;
    failed, the step stays in the head for the next owner to write out."""
    with claim.writes:
        sending, claim.sending = claim.sending, None
        if sending is not None and _answered(sending[1]):
            claim.unwritten = tuple(step for step in claim.unwritten if step is not sending[0])


def _same(a: Unwritten, b: Unwritten) -> bool:
    return (a.slot, a.record) == (b.slot, b.record)


def _newer(found: bytes, step: Unwritten) -> bool:
    """The slot holds a record or tombstone stamped after the step: the step was forgotten
    (a retry) and, perhaps, committed again since; either way it is not ours to write."""
    stamped = OpRecord.from_map(decode(found)).fence_epoch
    return stamped is not None and int(stamped) > step.epoch
