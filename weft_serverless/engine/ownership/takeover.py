"""The maintenance side of workflow-lease: renew held claims, take over expired ones, and
wake parked workflows whose awaited signals arrived (DESIGN.md section 6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.engine.ownership.base import Drive
from weft_serverless.engine.ownership.claims import (
    Claim,
    ClaimRegistry,
    OwnerRecords,
    release_ops,
    rotation,
)
from weft_serverless.engine.persistence.records import RUNNING, WorkflowState
from weft_serverless.engine.persistence.run_head import Head, Holder
from weft_serverless.engine.process.telemetry import skip_unsupported
from weft_serverless.errors import StorageError, UnsupportedSchemaVersionError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put
from weft_serverless.storage.keys.shards import EVERY_SHARD, Share

TAKEOVER_GRACE_MULTIPLIER = 2
TAKEOVER_MAX_ATTEMPTS = 5


class Takeover(ClaimRegistry):
    """Renewal, takeover of expired claims and signal polling, run by ``maintain``."""

    def maintain(
        self, drive: Drive, exhausted: Callable[[], bool], share: Share = EVERY_SHARD
    ) -> dict[str, int]:
        # Renewals and signal polls concern this engine's own claims, so every worker does
        # its own; only the scan for expired claims is split by shard. A worker keeps only
        # the parked runs whose timers its share fires: the holder of a parked run is the
        # one engine that may fire its timers (a wake elsewhere leaves them to it), so a
        # claim kept and renewed by a worker that never reads the run's timer shard would
        # keep them unfired for good. Released, the next wake anywhere claims the run.
        done: dict[str, int] = {}
        if share != EVERY_SHARD:
            done["claims_released"] = self.release_parked(
                keep=lambda workflow_id: self._fires_timers_of(workflow_id, share)
            )
        done["claims_renewed"] = self._renew(only_due=True)
        if not exhausted():
            done["claims_reclaimed"] = self._reclaim(drive, exhausted, share)
        if not exhausted():
            done["signal_polls_woken"] = self._poll_signals(drive)
        self.host.metrics.counters["claims_active"] = len(self.claims)
        return done

    def renew_all(self) -> None:
        self._renew(only_due=False)

    def _renew(self, *, only_due: bool) -> int:
        renewed = 0
        now = self.host.now()
        for workflow_id, claim in list(self.claims.items()):
            if only_due and now - claim.renewed_at < self.timing.renew_interval:
                continue
            try:
                kept = self._renew_one(workflow_id, claim)
            except StorageError:
                continue
            if kept is False:
                self.deposed(workflow_id, claim)
            renewed += kept is True
        return renewed

    def _fires_timers_of(self, workflow_id: str, share: Share) -> bool:
        """Whether a pass on ``share`` reads the shard ``workflow_id``'s timers are in (under
        either count while the counts change)."""
        layout = self.host.shards
        counts = (layout.counts, layout.pending or layout.counts)
        return any(share.owns(keys.shard_of(workflow_id, each.timers)) for each in counts)

    def _renew_one(self, workflow_id: str, claim: Claim) -> bool | None:
        """Extend ``claim``'s stored holder: True if renewed, False if refused (the claim was
        lost; the caller deposes it), None if there was nothing of ours to renew. Storage
        errors propagate."""
        with claim.lock, claim.writes:
            # Renew only a claim still registered (not released, dropped or replaced
            # meanwhile) whose acquiring batch has landed: anything else has no stored
            # holder of ours to extend, and a refusal would not mean it was lost.
            if not claim.landed or self.claims.get(workflow_id) is not claim:
                return None
            now = self.host.now()
            if self.inline_holder and claim.head is not None:
                return self._renew_head(workflow_id, claim, now)
            holder = decode(claim.holder_bytes)
            new, expires = self._holder(holder["epoch"], holder["claimed_at"])
            key = keys.owner_holder_key(workflow_id)
            if self.host.write([Condition(key, claim.holder_bytes)], [Put(key, new)]):
                claim.holder_bytes, claim.expires_at, claim.renewed_at = new, expires, now
                return True
            self.host.metrics.incr("claim_renewal_failures")
            return False

    def _renew_head(self, workflow_id: str, claim: Claim, now: float) -> bool:
        """Renewal on layout 3: the head put again with a later expiry, on the bytes this
        claim last wrote (under its write lock, so no plain step moves it meanwhile)."""
        head = Head.from_bytes(claim.head or b"")
        if head.holder is None:
            return False
        expires = now + self.timing.ttl
        new = head.held(head.epoch, Holder(head.holder.engine_id, expires, head.holder.claimed_at))
        key = keys.owner_head_key(workflow_id)
        if self.host.write([Condition(key, claim.head)], [Put(key, new)]):
            claim.head = claim.holder_bytes = new
            claim.expires_at, claim.renewed_at = expires, now
            return True
        self.host.metrics.incr("claim_renewal_failures")
        return False

    def _reclaim(self, drive: Drive, exhausted: Callable[[], bool], share: Share) -> int:
        """Take over the expired claims the claims index lists. Layout 3 writes no index:
        there an expired claim is taken over by the wake its run's timer brings (ADR 0056),
        so the pass reads no claims shard."""
        if self.inline_holder:
            return 0
        reclaimed = 0
        now = self.host.now()
        for shard in share.of(self.host.shards.read.claims):
            for sort, _ in self.host.storage.scan(keys.claim_partition(shard)):
                if exhausted():
                    return reclaimed
                workflow_id = keys.dec(sort)
                if workflow_id in self.claims:
                    continue
                until = self._cooldown.get(workflow_id, (0.0, 0.0))[0]
                if now < until:
                    self.host.metrics.incr("claim_attempts.backoff_skipped")
                    continue
                try:
                    taken = self._take_over(workflow_id, now)
                except UnsupportedSchemaVersionError as exc:
                    skip_unsupported(self.host.metrics, exc)  # left to an engine that reads it
                    continue
                if taken:
                    reclaimed += 1
                    drive(workflow_id, "reclaim")
        return reclaimed

    def _take_over(self, workflow_id: str, now: float) -> bool:
        """Claim an indexed workflow whose holder is gone or expired, if it is running and of
        a type this engine registers (a claim it could not use would be renewed for ever,
        keeping out every engine that can run it).

        Any other status holds no claim by rule, so what is stored is a leftover: it is
        cleaned up instead (``_clean_up``), never claimed again pass after pass.
        """
        for _ in range(TAKEOVER_MAX_ATTEMPTS):
            owner = self._read_owner(workflow_id)
            if owner.holder is None:
                outcome = "acquired"
            else:
                if not self._open_to_takeover(decode(owner.holder), now):
                    return False
                if not self.host.clock_guard.allows_takeover(f"workflow {workflow_id!r}", now):
                    return False
                outcome = "takeover"
            state_bytes = self.host.storage.get(keys.state_key(workflow_id))
            state = None if state_bytes is None else WorkflowState.from_bytes(state_bytes)
            if state is None or state.status != RUNNING:
                if self._clean_up(workflow_id, owner, state_bytes):
                    return False
                continue
            if state.type not in self.host.workflow_types:
                return False  # left to an engine that can run it, as a wake leaves it
            if self._try_claim(workflow_id, owner, outcome, state_bytes):
                return True
        return False

    def _open_to_takeover(self, holder: dict[str, Any], now: float) -> bool:
        """A holder's claim may be taken over once it expired and its grace passed."""
        expired_at = holder["expires_at"] + TAKEOVER_GRACE_MULTIPLIER * self.renew_interval
        return bool(expired_at < now)

    def _clean_up(self, workflow_id: str, owner: OwnerRecords, state_bytes: bytes | None) -> bool:
        """Remove the claim records of a run that is not running, on the bytes just read.

        A stored holder is deleted with epoch + 1, so whoever wrote it is fenced out exactly as
        by an external transition; the run itself is left as it is (a pending run is activated
        by its delayed start, a suspended one by resume).
        """
        layout = self.host.shards
        conditions = [
            Condition(keys.owner_holder_key(workflow_id), owner.holder),
            Condition(keys.state_key(workflow_id), state_bytes),
        ]
        ops: list[Op] = [Delete(key) for key in keys.claim_index_keys(layout, workflow_id)]
        if owner.holder is not None:
            fence, ops = rotation(workflow_id, owner)
            conditions += fence
            ops += release_ops(layout, workflow_id)
        if not self.host.write(conditions, ops):
            return False
        if owner.holder is not None:
            self.host.metrics.incr("claims_cleaned_up")
        return True

    def _poll_signals(self, drive: Drive) -> int:
        woken = 0
        partition_of = keys.workflow_partition
        for workflow_id, claim in list(self.claims.items()):
            if claim.driving or not claim.awaiting:
                continue
            for name in claim.awaiting:
                if next(
                    self.host.storage.scan(
                        partition_of(workflow_id), keys.signal_prefix(name), limit=1
                    ),
                    None,
                ):
                    drive(workflow_id, "signal")
                    woken += 1
                    break
        return woken
