"""How many shards each hash-sharded index of one store has, and how a change moves them.

Chosen when the store is created and kept in its layout marker (``meta/shards``); an engine
reads it when it opens the store, again at least every ``refresh`` seconds, and hands it to
every key function that picks a shard (ADR 0050). A store without a marker (every store
created before the choice existed) has the defaults, its layout then and now. While the
counts change, the marker also holds the counts the store moves to (``ShardLayout``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

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


STABLE, DELETING_BOTH, WRITING_NEW = 0, 1, 2
"""The phases of a change of counts (ADR 0050): none under way; deleters delete under both
layouts and readers read both while writers still write the old counts; writers write the new
counts while old items are moved. The change ends with the new counts ``STABLE``."""
PHASE_NAMES = {STABLE: "stable", DELETING_BOTH: "deleting under both", WRITING_NEW: "writing new"}


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """A store's counts as its marker holds them: ``counts`` and, while they change,
    ``pending`` (the counts moved to), the ``phase``, when it began (``since``, engine
    time) and how long each phase lasts at least (``settle``: the engines' re-read bound
    plus the longest invocation, so every engine has seen a phase before the next one)."""

    counts: ShardCounts = ShardCounts()
    pending: ShardCounts | None = None
    phase: int = STABLE
    since: float = 0.0
    settle: float = 0.0

    @property
    def write(self) -> ShardCounts:
        """The counts a new item is written under."""
        if self.phase == WRITING_NEW and self.pending is not None:
            return self.pending
        return self.counts

    @property
    def read(self) -> ShardCounts:
        """The shards a reader scans: every shard either layout can hold an item in."""
        if self.pending is None:
            return self.counts
        return ShardCounts(
            **{
                f.name: max(getattr(self.counts, f.name), getattr(self.pending, f.name))
                for f in fields(ShardCounts)
            }
        )

    @property
    def layouts(self) -> tuple[ShardCounts, ...]:
        """The counts a deleter deletes under, the written ones first: an entry found by a
        recomputed key may sit under either while a change is under way."""
        if self.pending is None or self.pending == self.counts:
            return (self.counts,)
        other = self.counts if self.write == self.pending else self.pending
        return (self.write, other)


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
