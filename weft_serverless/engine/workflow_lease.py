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
from .records import PENDING, RUNNING, SUSPENDED, TERMINAL, WorkflowState

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
    fresh: bool = False
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
        self, workflow_id: str, epoch_bytes: bytes | None, holder_bytes: bytes | None
    ) -> tuple[Fragment, Claim]:
        """Acquire (holder absent) or take over (holder stale): epoch := read + 1."""
        new_epoch = pack_epoch(unpack_epoch(epoch_bytes) + 1)
        holder, expires = self._holder(unpack_epoch(new_epoch))
        fragment = Fragment(
            conditions=[
                Condition(keys.owner_holder_key(workflow_id), holder_bytes),
                Condition(keys.owner_epoch_key(workflow_id), epoch_bytes),
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
        claim.fresh = True
        self.rt.metrics.incr("claim_attempts.acquired")  # undone by forget_start if refused
        with self._lock:
            self.claims[workflow_id] = claim
        return fragment

    def forget_start(self, workflow_id: str) -> None:
        self._drop(workflow_id)
        self.rt.metrics.incr("claim_attempts.acquired", -1)
        self.rt.metrics.incr("claim_attempts.lost_race")

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
        epoch_bytes, _ = self._read_owner(workflow_id)
        fragment, claim = self._claim_fragment(workflow_id, epoch_bytes, None)
        claim.fresh = True
        with self._lock:
            self.claims[workflow_id] = claim
        return fragment

    # -- wakes ------------------------------------------------------------------------------------

    def prepare_wake(self, workflow_id: str, kind: str, *, explicit: bool = False) -> Verdict:
        claim = self.claims.get(workflow_id)
        if claim is not None:
            if claim.fresh:  # just acquired by this engine's own batch: no other engine holds it
                claim.fresh = False
                claim.landed = claim.driving = True  # a drive only follows the landed batch
                return "drive"
            with claim.lock:  # a renewal must not change the holder between read and compare
                holder = self.rt.storage.get(keys.owner_holder_key(workflow_id))
                if holder == claim.holder_bytes and self.claims.get(workflow_id) is claim:
                    claim.driving = True
                    return "drive"
                self._drop(workflow_id, claim)
            warn(
                WorkflowWakeDiscarded,
                f"workflow {workflow_id!r}: {kind} wake discarded, this engine no longer owns it",
            )
            return self._retain_or_collect(workflow_id, self._status(workflow_id), holder, explicit)
        state = self._status(workflow_id)
        if state is None or state.status not in (RUNNING, PENDING):
            return "collect"
        if state.type not in self.rt.definitions:
            return "retain"  # an engine that cannot run this type must not claim it
        epoch_bytes, holder_bytes = self._read_owner(workflow_id)
        if holder_bytes is None and self._try_claim(workflow_id, epoch_bytes, None, "acquired"):
            self.claims[workflow_id].driving = True
            return "drive"
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
        """What to do with a wake this engine may not drive, from the records just read."""
        if explicit:
            if holder is None:  # lost an acquire race just now: name the winner
                holder = self.rt.storage.get(keys.owner_holder_key(workflow_id))
            held_by = decode(holder)["engine_id"] if holder is not None else "(none)"
            raise WorkflowClaimUnavailableError(workflow_id, held_by)
        if state is not None and state.status in (RUNNING, PENDING):
            return "retain"
        return "collect"

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
                if self._take_over(workflow_id, now):
                    reclaimed += 1
                    dispatcher.run(workflow_id, "reclaim")
        return reclaimed

    def _take_over(self, workflow_id: str, now: float) -> bool:
        for _ in range(TAKEOVER_MAX_ATTEMPTS):
            epoch_bytes, holder_bytes = self._read_owner(workflow_id)
            if holder_bytes is None:
                state = self._status(workflow_id)
                if state is None or state.status not in (RUNNING, PENDING):
                    self.rt.storage.delete(keys.claim_index_key(workflow_id))
                    return False
                outcome = "acquired"
            else:
                holder = decode(holder_bytes)
                expired_at = holder["expires_at"] + TAKEOVER_GRACE_MULTIPLIER * self.renew_interval
                if not expired_at < now:
                    return False
                outcome = "takeover"
            if self._try_claim(workflow_id, epoch_bytes, holder_bytes, outcome):
                self.claims[workflow_id].fresh = True
                return True
        return False

    def _try_claim(
        self, workflow_id: str, epoch_bytes: bytes | None, holder_bytes: bytes | None, outcome: str
    ) -> bool:
        fragment, claim = self._claim_fragment(workflow_id, epoch_bytes, holder_bytes)
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
