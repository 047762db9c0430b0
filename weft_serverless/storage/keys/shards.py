"""How many shards each hash-sharded index of one store has.

Chosen when the store is created and kept in its layout marker (``meta/shards``); an engine
reads it once when it opens the store and hands it to every key function that picks a shard
(ADR 0050). A store without a marker (every store created before the choice existed) has the
defaults, its layout then and now.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

DEFAULT_COUNT = 4
MAX_COUNT = 256
"""A maintenance pass reads every timer shard and a listing every status shard, so each shard
costs a request per pass or page: more than this is a typo, not a plan."""
LAYOUT = "shards"
"""The meta record (``meta/shards``) that holds a store's counts."""


@dataclass(frozen=True, slots=True)
class ShardCounts:
    """Shards per index: ``timers``, ``status`` (one set per status), ``claims``
    (workflow-lease), ``visibility`` (search attributes and tags), ``outbox`` (events)."""

    timers: int = DEFAULT_COUNT
    status: int = DEFAULT_COUNT
    claims: int = DEFAULT_COUNT
    visibility: int = DEFAULT_COUNT
    outbox: int = DEFAULT_COUNT

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


INDEXES = tuple(ShardCounts().as_dict())
DEFAULT_SHARDS = ShardCounts()

TIMER_SHARDS = DEFAULT_SHARDS.timers
STATUS_SHARDS = DEFAULT_SHARDS.status
CLAIM_SHARDS = DEFAULT_SHARDS.claims
VISIBILITY_SHARDS = DEFAULT_SHARDS.visibility
OUTBOX_SHARDS = DEFAULT_SHARDS.outbox
"""The counts of a store created without a choice; code that serves a store reads its own
counts (``Runtime.shards``) instead."""


@dataclass(frozen=True, slots=True)
class Share:
    """Which shards of each index one maintenance worker reads: ``s % workers == worker``.

    Workers given disjoint shares do no work twice; overlapping shares (a share reassigned
    mid-pass, a duplicated invocation) only repeat reads, since every write a pass makes is
    fenced (ADR 0055).
    """

    worker: int = 0
    workers: int = 1

    def owns(self, shard: int) -> bool:
        return shard % self.workers == self.worker

    def of(self, count: int) -> range:
        """The shards of an index of ``count`` shards this worker reads."""
        return range(self.worker, count, self.workers)


EVERY_SHARD = Share()
