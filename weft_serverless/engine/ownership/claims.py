"""What a workflow-lease engine holds: its claims, and the claim writes every part shares.

A claim is the engine's ownership of one workflow: a stored holder record and the epoch
its writes are fenced on (docs/decisions/0004-workflow-lease.md). ``ClaimRegistry`` keeps the
claims this engine holds and builds, takes and drops them; ``Takeover`` (maintenance) and
``WorkflowLease`` (the fence the engine talks to) build on it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from weft_serverless.codec import encode
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put

from ..records import WorkflowState
from ..telemetry import warn
from .base import Fragment, OwnerHost, Ownership, Timing, pack_epoch, unpack_epoch

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


class ClaimRegistry(Ownership):
    """The claims this engine holds, by workflow id, and how one is made, taken and dropped."""

    def __init__(self, host: OwnerHost, timing: Timing) -> None:
        super().__init__(host)
        self.timing = timing
        self.claims: dict[str, Claim] = {}
        self._cooldown: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

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
                Put(keys.claim_index_key(workflow_id), encode({"e": self.host.engine_id})),
            ],
        )
        return fragment, Claim(new_epoch, holder, expires, self.host.now())

    def _try_claim(
        self,
        workflow_id: str,
        epoch_bytes: bytes | None,
        holder_bytes: bytes | None,
        outcome: str,
        state_bytes: bytes | None,
    ) -> bool:
        fragment, claim = self._claim_fragment(workflow_id, epoch_bytes, holder_bytes, state_bytes)
        if not self.host.storage.conditional_batch(fragment.conditions, fragment.ops):
            self.host.metrics.incr("claim_attempts.lost_race")
            return False
        claim.landed = True
        with self._lock:
            self.claims[workflow_id] = claim
        self._cooldown.pop(workflow_id, None)
        self.host.metrics.incr(f"claim_attempts.{outcome}")
        return True

    def _read_owner(self, workflow_id: str) -> tuple[bytes | None, bytes | None]:
        found = dict(self.host.storage.scan(keys.workflow_partition(workflow_id), "owner#"))
        return found.get(keys.OWNER_EPOCH), found.get(keys.OWNER_HOLDER)

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


def release_ops(workflow_id: str) -> list[Op]:
    return [Delete(keys.owner_holder_key(workflow_id)), Delete(keys.claim_index_key(workflow_id))]
