"""``ownership="workflow-lease"``: one fenced owner per workflow, many engines per store.

Per workflow, an epoch (8-byte counter, never deleted) and a holder record
``{engine_id, epoch, expires_at, claimed_at}`` compared as opaque bytes. Every write of the
owner carries the epoch as a condition, so a deposed owner can never land one; the holder's
expiry only decides when another engine may take over (docs/decisions/0004-workflow-lease.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from weft_serverless.codec import decode, encode
from weft_serverless.errors import (
    StorageError,
    UnsupportedSchemaVersionError,
    WorkflowClaimLost,
    WorkflowClaimUnavailableError,
    WorkflowWakeDiscarded,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put

from .ownership import (
    EngineDeposedError,
    Fragment,
    Mode,
    Ownership,
    Timing,
    Verdict,
    establish_mode,
    pack_epoch,
    unpack_epoch,
    warn,
)
from .records import RUNNING, SUSPENDED, TERMINAL, WorkflowState
from .runtime import skip_unsupported

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .maintenance import Budget, MaintenanceReport
    from .runtime import Runtime

TAKEOVER_GRACE_MULTIPLIER = 2
TAKEOVER_MAX_ATTEMPTS = 5
COOLDOWN_CAP_MULTIPLIER = 4


@dataclass(slots=True)
class Claim:
    """What this engine holds on one workflow.

    ``lock`` serialises everything that reads or rewrites the stored holder against
    ``holder_bytes`` (renewal on a heartbeat or background thread, the wake check, release),
    so the bytes remembered here always equal the bytes stored while the claim is registered.
    ``landed`` is False while the batch that acquires the claim (a start or resume) has not
    committed yet: there is no stored holder to renew until it has.
    """

    epoch_bytes: bytes
    holder_bytes: bytes
    expires_at: float
    renewed_at: float
    driving: bool = False
    landed: bool = False
    awaiting: frozenset[str] = frozenset()
    lock: threading.Lock = field(default_factory=threading.Lock)


class WorkflowLease(Ownership):
    mode: Mode = "workflow-lease"

    def __init__(self, rt: Runtime, timing: Timing) -> None:
        super().__init__(rt)
        self.timing = timing
        self.claims: dict[str, Claim] = {}
        self._cooldown: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    @property
    def renew_interval(self) -> float:
        return self.timing.renew_interval

    def bootstrap(self) -> None:
        establish_mode(self.rt, self.mode)

    def needs_claim(self, workflow_id: str) -> bool:
        return workflow_id not in self.claims

    # -- fencing ------------------------------------------------------------------------------

    def conditions(self, workflow_id: str) -> list[Condition]:
        claim = self.claims.get(workflow_id)
        if claim is None:
            raise EngineDeposedError(workflow_id)
        return [Condition(keys.owner_epoch_key(workflow_id), claim.epoch_bytes)]

    def confirm_history(self, workflow_id: str, owner_epoch: bytes | None) -> None:
        """The epoch read with the history must be this claim's own.

        The wake check proves ownership when the drive was decided; the history is read after
        it, and between the two another engine may have suspended and resumed the run (epoch
        + 2; right after this engine's own acquire, say). The history read carries the stored
        epoch for free: a drive on an epoch that is not ours runs nothing (an activity run
        there would be fenced out at its commit, and run again by the owner).
        """
        claim = self.claims.get(workflow_id)
        if claim is None or owner_epoch != claim.epoch_bytes:
            raise EngineDeposedError(workflow_id)

    def on_lost_commit(self, workflow_id: str) -> None:
        claim = self.claims.get(workflow_id)
        current = self.rt.storage.get(keys.owner_epoch_key(workflow_id))
        if claim is None or current != claim.epoch_bytes:
            raise EngineDeposedError(workflow_id)

    # -- transitions ----------------------------------------------------------------------------

    def _holder(self, epoch: int, claimed_at: float | None = None) -> tuple[bytes, float]:
        now = self.rt.now()
        expires = now + self.timing.ttl
        record = {
            "engine_id": self.rt.engine_id,
            "epoch": epoch,
            "expires_at": expires,
            "claimed_at": now if claimed_at is None else claimed_at,
        }
        return encode(record), expires

    def _claim_fragment(
        self,
        workflow_id: str,
        epoch_bytes: bytes | None,
        holder_bytes: bytes | None,
        state_bytes: bytes | None = None,
    ) -> tuple[Fragment, Claim]:
        """Acquire (holder absent) or take over (holder stale): epoch := read + 1.

        ``state_bytes`` (the running state just read) makes the claim conditional on the run
        not having changed status since, so no claim can land on a run that ended meanwhile
        (a terminal run holds no claim). Lifecycle batches pass none: they condition on the
        state themselves.
        """
        new_epoch = pack_epoch(unpack_epoch(epoch_bytes) + 1)
        holder, expires = self._holder(unpack_epoch(new_epoch))
        state_fence = (
            [] if state_bytes is None else [Condition(keys.state_key(workflow_id), state_bytes)]
        )
        fragment = Fragment(
            conditions=[
                Condition(keys.owner_holder_key(workflow_id), holder_bytes),
                Condition(keys.owner_epoch_key(workflow_id), epoch_bytes),
                *state_fence,
            ],
            ops=[
                Put(keys.owner_epoch_key(workflow_id), new_epoch),
                Put(keys.owner_holder_key(workflow_id), holder),
                Put(keys.claim_index_key(workflow_id), encode({"e": self.rt.engine_id})),
            ],
        )
        return fragment, Claim(new_epoch, holder, expires, self.rt.now())

    def start_fragment(self, workflow_id: str, epoch: bytes | None = None) -> Fragment:
        fragment, claim = self._claim_fragment(workflow_id, epoch, None)
        self.rt.metrics.incr("claim_attempts.acquired")  # undone by forget_start if refused
        with self._lock:
            self.claims[workflow_id] = claim
        return fragment

    def forget_start(self, workflow_id: str) -> None:
        self._drop(workflow_id)
        self.rt.metrics.incr("claim_attempts.acquired", -1)
        self.rt.metrics.incr("claim_attempts.lost_race")

    def surviving_epoch(self, workflow_id: str) -> bytes | None:
        return self.rt.storage.get(keys.owner_epoch_key(workflow_id))

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
                ops=_release_ops(workflow_id),
            )
            # Still under the lock: a renewal waiting for it must find the claim gone, not
            # try to renew a holder the terminal commit just deleted.
            self._drop(workflow_id, claim)

    def rotate_fragment(self, workflow_id: str) -> Fragment:
        """External terminal transition: epoch + 1 so a still-running owner is fenced out."""
        epoch_key = keys.owner_epoch_key(workflow_id)
        read = self.rt.storage.get(epoch_key)
        self._drop(workflow_id)
        return Fragment(
            conditions=[Condition(epoch_key, read)],
            ops=[Put(epoch_key, pack_epoch(unpack_epoch(read) + 1)), *_release_ops(workflow_id)],
        )

    def resume_fragment(self, workflow_id: str) -> Fragment:
        """Claim folded into a move back to running from a status no engine may hold a claim
        in (pending, suspended, failed; the batch conditions on that state): whatever holder
        is stored is a leftover, so the claim replaces it on the bytes read, and epoch + 1
        fences out whoever wrote it. A leftover can therefore never block the transition."""
        epoch_bytes, holder_bytes = self._read_owner(workflow_id)
        fragment, claim = self._claim_fragment(workflow_id, epoch_bytes, holder_bytes)
        with self._lock:
            self.claims[workflow_id] = claim
        return fragment

    # -- wakes ------------------------------------------------------------------------------------

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
                holder = self.rt.storage.get(keys.owner_holder_key(workflow_id))
                if holder == claim.holder_bytes and self.claims.get(workflow_id) is claim:
                    claim.landed = claim.driving = True  # the stored holder is this claim's
                    return "drive"
                self._drop(workflow_id, claim)
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake discarded, this engine no longer owns it",
            )
            return self._retain_or_collect(workflow_id, self._status(workflow_id), holder, explicit)
        state_bytes = self.rt.storage.get(keys.state_key(workflow_id))
        state = None if state_bytes is None else WorkflowState.from_bytes(state_bytes)
        if state is None or state.status != RUNNING:
            return "collect"
        if state.type not in self.rt.definitions:
            return "retain"  # an engine that cannot run this type must not claim it
        epoch_bytes, holder_bytes = self._read_owner(workflow_id)
        if holder_bytes is None and self._try_claim(
            workflow_id, epoch_bytes, None, "acquired", state_bytes
        ):
            self.claims[workflow_id].driving = True
            return "drive"
        if holder_bytes is None:  # lost the acquire: the run may have ended meanwhile
            state = self._status(workflow_id)
        verdict = self._retain_or_collect(workflow_id, state, holder_bytes, explicit)
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
                holder = self.rt.storage.get(keys.owner_holder_key(workflow_id))
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

    def deposed(self, workflow_id: str, claim: Claim | None = None) -> None:
        """Stop driving ``workflow_id``; with ``claim``, only if that claim is still the one
        registered (a renewal refused for a claim replaced meanwhile deposes nothing)."""
        if claim is not None and self.claims.get(workflow_id) is not claim:
            return
        self._drop(workflow_id, claim)
        self._bump_cooldown(workflow_id)
        self.rt.metrics.incr("claim_attempts.deposed")
        warn(WorkflowClaimLost, f"workflow {workflow_id!r}: claim lost, stopped driving it")

    # -- maintenance ------------------------------------------------------------------------------

    def maintain(self, report: MaintenanceReport, budget: Budget, dispatcher: Dispatcher) -> None:
        report.parts["claims_renewed"] = self._renew(only_due=True)
        if not budget.exhausted():
            report.parts["claims_reclaimed"] = self._reclaim(budget, dispatcher)
        if not budget.exhausted():
            report.parts["signal_polls_woken"] = self._poll_signals(dispatcher)
        self.rt.metrics.counters["claims_active"] = len(self.claims)

    def renew_all(self) -> None:
        self._renew(only_due=False)

    def _renew(self, *, only_due: bool) -> int:
        renewed = 0
        now = self.rt.now()
        for workflow_id, claim in list(self.claims.items()):
            if only_due and now - claim.renewed_at < self.timing.renew_interval:
                continue
            with claim.lock:
                # Renew only a claim still registered (not released, dropped or replaced
                # meanwhile) whose acquiring batch has landed: anything else has no stored
                # holder of ours to extend, and a refusal would not mean it was lost.
                if not claim.landed or self.claims.get(workflow_id) is not claim:
                    continue
                holder = decode(claim.holder_bytes)
                new, expires = self._holder(holder["epoch"], holder["claimed_at"])
                key = keys.owner_holder_key(workflow_id)
                try:
                    ok = self.rt.storage.conditional_batch(
                        [Condition(key, claim.holder_bytes)], [Put(key, new)]
                    )
                except StorageError:
                    continue
                if ok:
                    claim.holder_bytes, claim.expires_at, claim.renewed_at = new, expires, now
                    renewed += 1
                    continue
                self.rt.metrics.incr("claim_renewal_failures")
                self.deposed(workflow_id, claim)
        return renewed

    def _reclaim(self, budget: Budget, dispatcher: Dispatcher) -> int:
        reclaimed = 0
        now = self.rt.now()
        for shard in range(keys.CLAIM_SHARDS):
            for sort, _ in self.rt.storage.scan(keys.claim_partition(shard)):
                if budget.exhausted():
                    return reclaimed
                workflow_id = keys.dec(sort)
                if workflow_id in self.claims:
                    continue
                until = self._cooldown.get(workflow_id, (0.0, 0.0))[0]
                if now < until:
                    self.rt.metrics.incr("claim_attempts.backoff_skipped")
                    continue
                try:
                    taken = self._take_over(workflow_id, now)
                except UnsupportedSchemaVersionError as exc:
                    skip_unsupported(self.rt, exc)  # left to an engine that reads it
                    continue
                if taken:
                    reclaimed += 1
                    dispatcher.run(workflow_id, "reclaim")
        return reclaimed

    def _take_over(self, workflow_id: str, now: float) -> bool:
        """Claim an indexed workflow whose holder is gone or expired, if it is running.

        Any other status holds no claim by rule, so what is stored is a leftover: it is
        cleaned up instead (``_clean_up``), never claimed again pass after pass.
        """
        for _ in range(TAKEOVER_MAX_ATTEMPTS):
            epoch_bytes, holder_bytes = self._read_owner(workflow_id)
            if holder_bytes is None:
                outcome = "acquired"
            else:
                holder = decode(holder_bytes)
                expired_at = holder["expires_at"] + TAKEOVER_GRACE_MULTIPLIER * self.renew_interval
                if not expired_at < now:
                    return False
                if not self.rt.clock_guard.allows_takeover(f"workflow {workflow_id!r}", now):
                    return False
                outcome = "takeover"
            state_bytes = self.rt.storage.get(keys.state_key(workflow_id))
            state = None if state_bytes is None else WorkflowState.from_bytes(state_bytes)
            if state is None or state.status != RUNNING:
                if self._clean_up(workflow_id, epoch_bytes, holder_bytes, state_bytes):
                    return False
                continue
            if self._try_claim(workflow_id, epoch_bytes, holder_bytes, outcome, state_bytes):
                return True
        return False

    def _clean_up(
        self,
        workflow_id: str,
        epoch_bytes: bytes | None,
        holder_bytes: bytes | None,
        state_bytes: bytes | None,
    ) -> bool:
        """Remove the claim records of a run that is not running, on the bytes just read.

        A stored holder is deleted with epoch + 1, so whoever wrote it is fenced out exactly as
        by an external transition; the run itself is left as it is (a pending run is activated
        by its delayed start, a suspended one by resume).
        """
        index = keys.claim_index_key(workflow_id)
        conditions = [
            Condition(keys.owner_holder_key(workflow_id), holder_bytes),
            Condition(keys.state_key(workflow_id), state_bytes),
        ]
        ops: list[Op] = [Delete(index)]
        if holder_bytes is not None:
            epoch_key = keys.owner_epoch_key(workflow_id)
            conditions.append(Condition(epoch_key, epoch_bytes))
            ops = [
                Put(epoch_key, pack_epoch(unpack_epoch(epoch_bytes) + 1)),
                *_release_ops(workflow_id),
            ]
        if not self.rt.storage.conditional_batch(conditions, ops):
            return False
        if holder_bytes is not None:
            self.rt.metrics.incr("claims_cleaned_up")
        return True

    def _try_claim(
        self,
        workflow_id: str,
        epoch_bytes: bytes | None,
        holder_bytes: bytes | None,
        outcome: str,
        state_bytes: bytes | None,
    ) -> bool:
        fragment, claim = self._claim_fragment(workflow_id, epoch_bytes, holder_bytes, state_bytes)
        if not self.rt.storage.conditional_batch(fragment.conditions, fragment.ops):
            self.rt.metrics.incr("claim_attempts.lost_race")
            return False
        claim.landed = True
        with self._lock:
            self.claims[workflow_id] = claim
        self._cooldown.pop(workflow_id, None)
        self.rt.metrics.incr(f"claim_attempts.{outcome}")
        return True

    def _poll_signals(self, dispatcher: Dispatcher) -> int:
        woken = 0
        partition_of = keys.workflow_partition
        for workflow_id, claim in list(self.claims.items()):
            if claim.driving or not claim.awaiting:
                continue
            for name in claim.awaiting:
                if next(
                    self.rt.storage.scan(
                        partition_of(workflow_id), keys.signal_prefix(name), limit=1
                    ),
                    None,
                ):
                    dispatcher.run(workflow_id, "signal")
                    woken += 1
                    break
        return woken

    def release_parked(self) -> int:
        released = 0
        for workflow_id, claim in list(self.claims.items()):
            if claim.driving:
                continue
            with claim.lock:
                if self.claims.get(workflow_id) is not claim:
                    continue
                try:
                    self.rt.storage.conditional_batch(
                        [Condition(keys.owner_holder_key(workflow_id), claim.holder_bytes)],
                        _release_ops(workflow_id),
                    )
                    released += 1
                except StorageError:
                    pass
                self._drop(workflow_id, claim)
        return released

    def close(self) -> None:
        self.release_parked()

    def owner_of(self, workflow_id: str) -> dict[str, object] | None:
        holder = self.rt.storage.get(keys.owner_holder_key(workflow_id))
        if holder is None:
            return None
        owner: dict[str, object] = decode(holder)
        return owner

    # -- helpers ----------------------------------------------------------------------------------

    def _read_owner(self, workflow_id: str) -> tuple[bytes | None, bytes | None]:
        found = dict(self.rt.storage.scan(keys.workflow_partition(workflow_id), "owner#"))
        return found.get(keys.OWNER_EPOCH), found.get(keys.OWNER_HOLDER)

    def _status(self, workflow_id: str) -> WorkflowState | None:
        data = self.rt.storage.get(keys.state_key(workflow_id))
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
        self._cooldown[workflow_id] = (self.rt.now() + delay, delay)


def _release_ops(workflow_id: str) -> list[Op]:
    return [Delete(keys.owner_holder_key(workflow_id)), Delete(keys.claim_index_key(workflow_id))]
