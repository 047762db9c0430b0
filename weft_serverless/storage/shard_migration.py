"""Changing a live store's shard counts: the phases in its marker and the pass that moves items.

The procedure (ADR 0050), one ``advance`` at a time, each resumable from the marker alone:

0. ``counts: N``, stable.
1. ``pending: M``, phase ``DELETING_BOTH``: deleters delete under both layouts and readers
   read shards ``0..max(N, M) - 1``; writers still write N.
2. Phase ``WRITING_NEW``, entered ``settle`` after 1: writers write M. Once ``settle`` has
   passed again (no engine writes N any more), ``migrate`` moves every status, claim,
   attribute and tag item that is not in its M shard, one conditional batch per item.
3. ``counts: M``, stable again, once the pass found nothing left to move and (on a shrink)
   no timer or outbox item is left in a shard at or above M.

``settle`` is the engines' re-read bound (``LiveShards.refresh``) plus the longest
invocation: an engine re-reads the marker before any index write once its copy is
``refresh`` old, and an invocation that computed a key before that finishes within the
longest invocation, so when a phase begins no engine acts on the one before the previous.
Timers and outbox items never move: each is deleted by the key it was read or stored under,
and every reader scans both layouts' shards until the change ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from weft_serverless.codec import decode
from weft_serverless.errors import ConfigurationError, StorageError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Put, Storage
from weft_serverless.storage.keys.shards import (
    DELETING_BOTH,
    PHASE_NAMES,
    STABLE,
    WRITING_NEW,
    ShardCounts,
    ShardLayout,
)
from weft_serverless.storage.shard_layout import check_shards, marker_bytes, read_marker

PAGE = 500
"""Items read per request while the pass walks a partition."""
_ATTEMPTS = 5
DEFAULT_LONGEST_INVOCATION = 900.0
"""Seconds: Lambda's longest invocation, the bound on how long a key computed before an
engine re-read the marker can wait before it is written."""
POLL = 15.0
"""Seconds a shrink waits before looking again at a timer or outbox shard it waits on."""


@dataclass(frozen=True, slots=True)
class ShardChange:
    """Where a change of a store's shard counts stands.

    ``phase``: ``stable``, ``deleting under both`` or ``writing new``. ``counts``: the counts
    the store has (during a change, the ones it moves from); ``pending``: the ones it moves
    to (None when stable). ``next_at``: the engine time the next phase may begin (None when
    done). ``moved``: items this call moved. ``waiting_on``: on a shrink, a timer or outbox
    partition at or above the new count that still holds items (the change ends once they
    fired or were published).
    """

    phase: str
    counts: dict[str, int]
    pending: dict[str, int] | None = None
    next_at: float | None = None
    moved: int = 0
    waiting_on: str | None = None

    @property
    def done(self) -> bool:
        return self.pending is None


def describe(layout: ShardLayout, **extra: object) -> ShardChange:
    """The report of ``layout`` as a ``ShardChange``."""
    return ShardChange(
        phase=PHASE_NAMES[layout.phase],
        counts=layout.counts.as_dict(),
        pending=None if layout.pending is None else layout.pending.as_dict(),
        **extra,  # type: ignore[arg-type]
    )


def stored_layout(storage: Storage) -> ShardLayout:
    """The store's layout (the defaults when it has no marker)."""
    found = read_marker(storage)
    return ShardLayout() if found is None else found[0]


def show(storage: Storage) -> ShardChange:
    """Where the store's counts stand: a change under way reports when its next phase may
    begin."""
    layout = stored_layout(storage)
    return describe(
        layout, next_at=None if layout.pending is None else layout.since + layout.settle
    )


def target_counts(layout: ShardLayout, shards: Mapping[str, int] | None) -> ShardCounts:
    """The counts a change asks for: ``shards`` over the store's counts (unlisted indexes
    keep theirs); None carries on with the change under way (or asks for none). Bad input
    raises ``ConfigurationError`` before anything is written."""
    if shards is None:
        return layout.pending or layout.counts
    check_shards(shards)
    target = dataclasses.replace(layout.counts, **shards)
    if layout.pending is not None and target not in (layout.pending, layout.counts):
        raise ConfigurationError(
            f"a change of shard counts to {layout.pending.as_dict()} is under way; finish it "
            "first (run it again with those counts, or with none) before asking for "
            f"{target.as_dict()}"
        )
    if layout.pending is not None:
        return layout.pending
    return target


def check_settle(settle: float) -> float:
    if isinstance(settle, bool) or not isinstance(settle, int | float) or not settle >= 0:
        raise ConfigurationError(
            f"the wait between phases must be a number of seconds, 0 or more, got {settle!r}"
        )
    return float(settle)


def advance(
    storage: Storage, target: ShardCounts, now: float, settle: float, statuses: Iterable[str]
) -> ShardChange:
    """Take the store's counts one phase towards ``target`` if its wait has passed, and
    report where the change stands. Safe to call again at any time, from any process: every
    marker write is conditional on the marker as read, and the pass only moves what it
    finds out of place."""
    statuses = list(statuses)
    key = keys.meta_key(keys.LAYOUT)
    for _ in range(_ATTEMPTS):
        found = read_marker(storage)
        layout, stored = found if found is not None else (ShardLayout(), None)
        if layout.pending is None:
            if layout.counts == target:
                return describe(layout)
            new = ShardLayout(layout.counts, target, DELETING_BOTH, now, check_settle(settle))
        elif layout.pending != target:
            raise ConfigurationError(
                f"a change of shard counts to {layout.pending.as_dict()} is under way; finish "
                f"it before asking for {target.as_dict()}"
            )
        elif now < layout.since + layout.settle:
            return describe(layout, next_at=layout.since + layout.settle)
        elif layout.phase == DELETING_BOTH:
            new = dataclasses.replace(layout, phase=WRITING_NEW, since=now)
        else:
            moved = migrate(storage, layout, statuses)
            waiting = leftover(storage, layout)
            if waiting is not None:
                partition, due = waiting
                return describe(
                    layout, next_at=max(due, now + POLL), moved=moved, waiting_on=partition
                )
            new = ShardLayout(target)
            if _write(storage, key, stored, new, now):
                return describe(new, moved=moved)
            continue
        if _write(storage, key, stored, new, now):
            return describe(new, next_at=now + new.settle)
    raise StorageError("the store's shard-count marker kept changing; try again")


def _write(
    storage: Storage, key: Key, stored: bytes | None, layout: ShardLayout, now: float
) -> bool:
    return storage.conditional_batch(
        [Condition(key, stored)], [Put(key, marker_bytes(layout, now))]
    )


# -- the pass that moves items ---------------------------------------------------------------


def migrate(storage: Storage, layout: ShardLayout, statuses: Iterable[str]) -> int:
    """Move every status, tag, attribute and claim item that is not in its shard under
    ``layout.pending``; returns how many moved. Resumable: it reads every shard either
    layout has and moves only what is out of place, so a rerun after a crash finds what is
    left. Attribute names come from the status entries, which hold their run's attributes."""
    new = layout.pending
    if new is None:
        return 0
    scan = layout.read
    moved = 0
    names: set[str] = set()
    for status in statuses:
        for shard in range(scan.status):
            partition = keys.status_partition(status, shard)
            for sort, value in _walk(storage, partition):
                names.update(decode(value).get("sa") or {})
                wanted = keys.shard_of(keys.status_entry_id(sort), new.status)
                target = keys.status_partition(status, wanted)
                moved += _move(storage, Key(partition, sort), value, target)
    visibility = [keys.tag_partition] + [
        (lambda shard, name=name: keys.attribute_partition(name, shard)) for name in sorted(names)
    ]
    for partition_of in visibility:
        for shard in range(scan.visibility):
            partition = partition_of(shard)
            for sort, value in _walk(storage, partition):
                wanted = keys.shard_of(_run_of(sort), new.visibility)
                moved += _move(storage, Key(partition, sort), value, partition_of(wanted))
    for shard in range(scan.claims):
        partition = keys.claim_partition(shard)
        for sort, value in _walk(storage, partition):
            target = keys.claim_partition(keys.shard_of(keys.dec(sort), new.claims))
            moved += _move(storage, Key(partition, sort), value, target)
    return moved


def _run_of(sort: str) -> str:
    """The run id at the end of an attribute or tag item's sort key."""
    return keys.dec(sort.rsplit("#", 1)[1])


def _walk(storage: Storage, partition: str) -> Iterator[tuple[str, bytes]]:
    """A partition's items a page at a time, so moving items out of it while it is read
    never disturbs the read."""
    last: str | None = None
    while True:
        page = list(storage.scan(partition, gt=last, limit=PAGE))
        yield from page
        if len(page) < PAGE:
            return
        last = page[-1][0]


def _move(storage: Storage, old: Key, value: bytes, partition: str) -> int:
    """Move one item to ``partition`` in one conditional batch on the item as read: a writer
    that deleted or rewrote it meanwhile wins, and the item is never in both places nor in
    neither. Returns 1 when it moved."""
    if old.partition == partition:
        return 0
    new = Key(partition, old.sort)
    if storage.conditional_batch(
        [Condition(old, value), Condition(new, None)], [Put(new, value), Delete(old)]
    ):
        return 1
    if storage.get(new) is not None:  # already written in its new place: the old copy is stale
        storage.conditional_batch([Condition(old, value)], [Delete(old)])
    return 0


def leftover(storage: Storage, layout: ShardLayout) -> tuple[str, float] | None:
    """On a shrink, the first partition at or above the new counts that still holds items
    the pass does not move (timers, outbox), with when to look again; None when none."""
    new = layout.pending
    if new is None:
        return None
    for shard in range(new.timers, layout.counts.timers):
        partition = keys.timer_partition(shard)
        first = next(iter(storage.scan(partition, limit=1)), None)
        if first is not None:
            return partition, keys.timer_due_of(first[0])
    for shard in range(new.outbox, layout.counts.outbox):
        partition = keys.outbox_partition(shard)
        if next(iter(storage.scan(partition, limit=1)), None) is not None:
            return partition, 0.0
    return None


__all__ = [
    "DEFAULT_LONGEST_INVOCATION",
    "STABLE",
    "ShardChange",
    "advance",
    "check_settle",
    "describe",
    "leftover",
    "migrate",
    "show",
    "stored_layout",
    "target_counts",
]
