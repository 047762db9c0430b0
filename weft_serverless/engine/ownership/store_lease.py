"""``ownership="lease"``: one engine writes the whole store, fenced on a store-wide epoch.

Acquired before recovery, renewed by maintenance, released at close. Every engine write
carries the epoch as a condition, so an engine that lost the lease (paused, partitioned) can
never land a write; when it notices, it stops itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from weft_serverless.codec import decode, encode
from weft_serverless.engine.ownership.base import (
    Drive,
    Fragment,
    Mode,
    OwnerHost,
    Ownership,
    Timing,
    establish_mode,
    pack_epoch,
    unpack_epoch,
)
from weft_serverless.engine.process.telemetry import warn
from weft_serverless.errors import EngineLeaseLostError, EngineLeaseUnavailableError, StorageError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Put
from weft_serverless.storage.keys.shards import EVERY_SHARD, Share


class EngineLeaseLost(RuntimeWarning):
    """This engine lost the store-wide lease and stopped."""


class StoreLease(Ownership):
    mode: Mode = "lease"

    def __init__(
        self,
        host: OwnerHost,
        timing: Timing,
        wait_timeout: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(host)
        self.timing = timing
        self.wait_timeout = wait_timeout
        self._sleep = sleep
        self.epoch_bytes: bytes | None = None
        self.holder_bytes: bytes | None = None
        self.renewed_at = 0.0
        self.lost = False
        # Renewal runs on the invocation heartbeat's thread and in maintenance on the caller's:
        # both compare against and replace ``holder_bytes``, so one must see the other's result.
        self._lock = threading.Lock()

    @property
    def renew_interval(self) -> float:
        return self.timing.renew_interval

    def bootstrap(self) -> None:
        establish_mode(self.host, self.mode)
        deadline = time.monotonic() + self.wait_timeout
        while True:
            held_by = self._try_acquire()
            if held_by is None:
                return
            if time.monotonic() >= deadline:
                raise EngineLeaseUnavailableError(
                    str(held_by["engine_id"]), float(str(held_by["expires_at"]))
                )
            self._sleep(min(self.timing.renew_interval, max(0.0, deadline - time.monotonic())))

    def _try_acquire(self) -> dict[str, object] | None:
        epoch_key, holder_key = keys.meta_key(keys.LEASE_EPOCH), keys.meta_key(keys.LEASE_HOLDER)
        epoch, holder = self.host.storage.get(epoch_key), self.host.storage.get(holder_key)
        now = self.host.now()
        if holder is not None:
            current: dict[str, object] = decode(holder)
            expires = current["expires_at"]
            assert isinstance(expires, float | int)
            if expires >= now or not self.host.clock_guard.allows_takeover("the lease", now):
                return current
        new_epoch = pack_epoch(unpack_epoch(epoch) + 1)
        new_holder = self._holder(new_epoch, now)
        ok = self.host.write(
            [Condition(epoch_key, epoch), Condition(holder_key, holder)],
            [Put(epoch_key, new_epoch), Put(holder_key, new_holder)],
        )
        if not ok:
            return {"engine_id": "(racing engine)", "expires_at": now}
        self.epoch_bytes, self.holder_bytes, self.renewed_at = new_epoch, new_holder, now
        self.host.metrics.incr("lease.acquired")
        return None

    def _holder(self, epoch: bytes, now: float) -> bytes:
        return encode(
            {
                "engine_id": self.host.engine_id,
                "epoch": unpack_epoch(epoch),
                "expires_at": now + self.timing.ttl,
            }
        )

    def _fence(self) -> list[Condition]:
        if self.lost or self.epoch_bytes is None:
            raise EngineLeaseLostError("this engine lost the store-wide lease and stopped")
        return [Condition(keys.meta_key(keys.LEASE_EPOCH), self.epoch_bytes)]

    def conditions(self, workflow_id: str) -> list[Condition]:
        return self._fence()

    def external_conditions(self) -> list[Condition]:
        return self._fence()

    def start_fragment(self, workflow_id: str, epoch: bytes | None = None) -> Fragment:
        return Fragment(conditions=self._fence())

    def rotate_fragment(self, workflow_id: str) -> Fragment:
        return Fragment(conditions=self._fence())

    def resume_fragment(self, workflow_id: str) -> Fragment:
        return Fragment(conditions=self._fence())

    def before_activity(self, workflow_id: str) -> None:
        """Run an activity only on a lease this engine's clock says is live. One with less
        than a renew interval left missed its renewals (nothing renewed it for a while, or
        the engine stalled), and another engine may hold the store by now and run the
        activity too: the lease is renewed first, and a refused renewal stops this engine
        before anything runs. A healthy lease costs no request here."""
        if self.lost:
            raise EngineLeaseLostError("this engine lost the store-wide lease and stopped")
        if self.host.now() < self.renewed_at + self.timing.ttl - self.timing.renew_interval:
            return
        self.renew_all()

    def on_lost_commit(self, workflow_id: str) -> None:
        self.check_store_fence()

    def check_store_fence(self) -> None:
        if self.host.storage.get(keys.meta_key(keys.LEASE_EPOCH)) != self.epoch_bytes:
            self._stop()

    def _stop(self) -> None:
        self.lost = True
        self.host.stop()
        warn(EngineLeaseLost, f"engine {self.host.engine_id} lost the store-wide lease; stopping")
        raise EngineLeaseLostError("this engine lost the store-wide lease and stopped")

    def maintain(
        self, drive: Drive, exhausted: Callable[[], bool], share: Share = EVERY_SHARD
    ) -> dict[str, int]:
        if self.host.now() - self.renewed_at < self.timing.renew_interval:
            return {}
        self.renew_all()
        return {"lease_renewed": 1}

    def renew_all(self) -> None:
        key = keys.meta_key(keys.LEASE_HOLDER)
        with self._lock:
            if self.lost or self.holder_bytes is None:
                return  # stopped or closed meanwhile: nothing of ours to renew
            now = self.host.now()
            assert self.epoch_bytes is not None
            new = self._holder(self.epoch_bytes, now)
            condition = Condition(key, self.holder_bytes)
            if self.host.write([condition], [Put(key, new)]):
                self.holder_bytes, self.renewed_at = new, now
                return
            self.host.metrics.incr("lease.renewal_failures")
            self._stop()

    def close(self) -> None:
        with self._lock:
            if self.lost or self.holder_bytes is None:
                return
            key = keys.meta_key(keys.LEASE_HOLDER)
            with contextlib.suppress(StorageError):
                self.host.write([Condition(key, self.holder_bytes)], [Delete(key)])
            self.holder_bytes = None
