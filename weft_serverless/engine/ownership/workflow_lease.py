"""``ownership="workflow-lease"``: one fenced owner per workflow, many engines per store.

Per workflow, an epoch (8-byte counter, never deleted) and a holder record
``{engine_id, epoch, expires_at, claimed_at}`` compared as opaque bytes. Every write of the
owner carries the epoch as a condition, so a deposed owner can never land one; the holder's
expiry only decides when another engine may take over (docs/decisions/0004-workflow-lease.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from weft_serverless.codec import decode
from weft_serverless.engine.ownership.base import (
    HEAD_LAYOUT,
    NO_LOCK,
    EngineDeposedError,
    Fragment,
    Mode,
    Verdict,
    establish_mode,
    stored_owner,
    unpack_epoch,
)
from weft_serverless.engine.ownership.claims import OwnerRecords, release_ops, rotation
from weft_serverless.engine.ownership.takeover import Takeover
from weft_serverless.engine.persistence.records import (
    RUNNING,
    SUSPENDED,
    TERMINAL,
    History,
    WorkflowState,
)
from weft_serverless.engine.persistence.run_head import Head, Unwritten
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

    def bootstrap(self) -> None:
        self.heads = establish_mode(self.host, self.mode) == HEAD_LAYOUT

    def needs_claim(self, workflow_id: str) -> bool:
        return workflow_id not in self.claims

    def conditions(self, workflow_id: str) -> list[Condition]:
        claim = self.claims.get(workflow_id)
        if claim is None:
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
            claim.head, claim.unwritten = head, history.unwritten

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
        """One conditional put of the head, carrying the step inline, after the previous
        inline step is written out: the step's whole commit (ADR 0037).

        On a store whose batches cost one commit however many items they hold (SQLite), the
        write-out, the blob and the head put go as one batch under both their conditions
        (ADR 0051): one commit per step where the separate writes cost three. The stored
        items are the same as the separate writes leave, so the reader rule and the layout
        do not change. Refused, the batch lands nothing, and the step is committed as on
        any other store: the write-out alone (which settles a changed slot by reading it
        back), then the head put, refused in turn if the head has moved.
        """
        claim = self.claims.get(workflow_id)
        if claim is None or claim.head is None:
            raise EngineDeposedError(workflow_id)
        key = keys.owner_head_key(workflow_id)
        if self.host.storage.capabilities().cheap_multi_item_batch:
            with claim.writes:
                new = Head.from_bytes(claim.head).with_step(slot, record)
                conditions, ops = _folded(workflow_id, claim.unwritten, blob)
                conditions.append(Condition(key, claim.head))
                ops.append(Put(key, new))
                if self.host.write(conditions, ops):
                    claim.head, claim.unwritten = new, Unwritten(slot, record, expected)
                    return True
                if claim.unwritten is None:  # the head alone was conditioned: it moved
                    return False
        self.flush(workflow_id)
        if blob is not None:  # a plain put: landing without its head, it is named by nothing
            self.host.write([], [blob])
        with claim.writes:
            new = Head.from_bytes(claim.head).with_step(slot, record)
            if not self.host.write([Condition(key, claim.head)], [Put(key, new)]):
                return False
            claim.head, claim.unwritten = new, Unwritten(slot, record, expected)
        return True

    def flush(self, workflow_id: str) -> None:
        """Write the inline step out to its own item, before anything else is written: a
        slot is put on what it held when read, so a write-out never replaces a newer item
        (a tombstone, or a later owner's copy); the same bytes already there are success."""
        claim = self.claims.get(workflow_id)
        if claim is None or claim.unwritten is None:
            return
        with claim.writes:
            step = claim.unwritten
            if step is None:
                return
            key = keys.op_key(workflow_id, step.slot)
            expected = step.expected
            for _ in range(WRITE_OUT_ATTEMPTS):
                if self.host.write([Condition(key, expected)], [Put(key, step.record)]):
                    break
                found = self.host.storage.get(key)
                if found == step.record or (found is not None and _newer(found, step)):
                    break
                expected = found
            else:
                raise StorageError(
                    f"step {step.slot} of workflow {workflow_id!r} could not be written out "
                    "(its slot kept changing); the next drive writes it out again"
                )
            claim.unwritten = None

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
        if claim is None:
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

    @contextmanager
    def release_for_terminal(self, workflow_id: str) -> Iterator[Fragment]:
        claim = self.claims.get(workflow_id)
        if claim is None:
            raise EngineDeposedError(workflow_id)
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
            return self._retain_or_collect(workflow_id, self._status(workflow_id), holder, explicit)
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
        verdict = self._retain_or_collect(workflow_id, state, owner.holder, explicit)
        if verdict == "retain":
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake left to the engine that holds it",
                logging.INFO,  # routine in a fleet: the owner acts on it
            )
        return verdict

    def _retain_or_collect(
        self,
        workflow_id: str,
        state: WorkflowState | None,
        holder: bytes | None,
        explicit: bool,
    ) -> Verdict:
        """What to do with a wake this engine may not drive, from the records just read.

        Only a running run is anyone's to drive: any other is collected, even on an explicit
        call (there is no owner to name)."""
        if state is None or state.status != RUNNING:
            return "collect"
        if explicit:
            if holder is None:  # lost an acquire race just now: name the winner
                holder = self.host.storage.get(keys.owner_holder_key(workflow_id))
            held_by = decode(holder)["engine_id"] if holder is not None else "(none)"
            raise WorkflowClaimUnavailableError(workflow_id, held_by)
        return "retain"

    def after_drive(self, workflow_id: str, status: str | None, awaiting: frozenset[str]) -> None:
        """Forget the claim of a run that ended or left; keep it (not driving) otherwise.

        ``status`` is ``"error"`` when the drive raised: the stored holder is still ours, so
        the claim stays registered to be renewed or released, never silently leaked.
        """
        claim = self.claims.get(workflow_id)
        if claim is None:
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
            with claim.lock:
                if self.claims.get(workflow_id) is not claim:
                    continue
                try:
                    self.host.write(
                        [Condition(keys.owner_holder_key(workflow_id), claim.holder_bytes)],
                        release_ops(self.host.shards, workflow_id),
                    )
                    released += 1
                except StorageError:
                    pass
                self._drop(workflow_id, claim)
        return released

    def close(self) -> None:
        self.release_parked()

    def held_elsewhere(self, workflow_id: str) -> bool:
        holder = self.host.storage.get(keys.owner_holder_key(workflow_id))
        if holder is None:
            return False
        record = decode(holder)
        return bool(
            record["engine_id"] != self.host.engine_id
            and not self._open_to_takeover(record, self.host.now())
        )

    def owner_of(self, workflow_id: str) -> dict[str, object] | None:
        return stored_owner(self.host.storage, workflow_id)


WRITE_OUT_ATTEMPTS = 3


def _folded(
    workflow_id: str, step: Unwritten | None, blob: Put | None
) -> tuple[list[Condition], list[Op]]:
    """What a step's one batch writes before its head: the inline step before it, written
    out on what its slot held when read (as ``flush`` writes it), and the blob the new step
    names (unconditioned, as it is put alone)."""
    conditions: list[Condition] = []
    ops: list[Op] = []
    if step is not None:
        item = keys.op_key(workflow_id, step.slot)
        conditions.append(Condition(item, step.expected))
        ops.append(Put(item, step.record))
    if blob is not None:
        ops.append(blob)
    return conditions, ops


def _newer(found: bytes, step: Unwritten) -> bool:
    """The slot holds a record or tombstone stamped after the step: the step was forgotten
    (a retry) and, perhaps, committed again since; either way it is not ours to write."""
    stamped = OpRecord.from_map(decode(found)).fence_epoch
    return stamped is not None and int(stamped) > step.epoch
