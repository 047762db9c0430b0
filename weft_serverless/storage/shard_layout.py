"""A store's shard counts: checked, chosen when the store is created, read at open and again
at least every ``refresh`` seconds.

Invariant (ADR 0050): every engine that serves a store uses the layout of its ``meta/shards``
marker as read at most ``refresh`` seconds ago, or the defaults when it has none; the marker
is first written only while the store holds no item of any sharded index (so no entry was
ever written under other counts), with a condition that it is still absent. Afterwards only
the change procedure (``shard_migration``) rewrites it, one phase at a time, each on the
marker as read and each at least ``settle`` seconds after the previous one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from weft_serverless.codec import decode_record, encode
from weft_serverless.errors import ConfigurationError, StorageError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Put, Storage
from weft_serverless.storage.keys.shards import (
    DEFAULT_SHARDS,
    INDEXES,
    MAX_COUNT,
    STABLE,
    ShardCounts,
    ShardLayout,
)

DEFAULT_REFRESH = 60.0
"""Seconds an engine uses its copy of the marker before reading it again (``R``, ADR 0050)."""


def check_shards(shards: Mapping[str, int] | None) -> ShardCounts | None:
    """The counts an engine was asked for (None: adopt the store's); unlisted indexes keep
    the default. Raises ``ConfigurationError`` before anything is read or written."""
    if shards is None:
        return None
    if not isinstance(shards, Mapping):
        raise ConfigurationError(f"shards must be a mapping of index name to count, got {shards!r}")
    unknown = sorted(set(shards) - set(INDEXES))
    if unknown:
        raise ConfigurationError(
            f"shards names unknown index(es) {unknown}; the indexes are {list(INDEXES)}"
        )
    for name, count in shards.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise ConfigurationError(
                f"shards[{name!r}] must be a whole number from 1 to {MAX_COUNT}, got {count!r}"
            )
    return ShardCounts(**shards)


def check_refresh(refresh: float) -> float:
    """The re-read bound an engine was given: a number of seconds above 0."""
    if (
        isinstance(refresh, bool)
        or not isinstance(refresh, int | float)
        or not 0 < refresh < math.inf
    ):
        raise ConfigurationError(
            f"shards_refresh must be a finite number of seconds above 0, got {refresh!r}"
        )
    return float(refresh)


def read_shards(storage: Storage) -> ShardCounts | None:
    """The counts in the store's marker (during a change, the ones it moves from); None on
    a store created without one."""
    found = read_marker(storage)
    return None if found is None else found[0].counts


def read_marker(storage: Storage) -> tuple[ShardLayout, bytes] | None:
    """The layout in the store's marker and the marker's bytes (the condition a change
    writes on); None on a store created without one. One consistent point read."""
    stored = storage.get(keys.meta_key(keys.LAYOUT))
    if stored is None:
        return None
    record = decode_record(stored, "the store's shard-count marker")
    pending = record.get("pending")
    return (
        ShardLayout(
            counts=_counts_of(record.get("counts")),
            pending=None if pending is None else _counts_of(pending),
            phase=int(record.get("phase", STABLE)),
            since=float(record.get("since", 0.0)),
            settle=float(record.get("settle", 0.0)),
        ),
        stored,
    )


def marker_bytes(layout: ShardLayout, established_at: float) -> bytes:
    """The stored marker of ``layout``; a store that is not changing keeps the fields it
    had before changes existed (its bytes are what an engine of that release reads)."""
    record: dict[str, Any] = {"counts": layout.counts.as_dict(), "established_at": established_at}
    if layout.pending is not None:
        record.update(
            pending=layout.pending.as_dict(),
            phase=layout.phase,
            since=layout.since,
            settle=layout.settle,
        )
    return encode(record)


def _counts_of(counts: object) -> ShardCounts:
    if not isinstance(counts, dict):
        raise StorageError("the store's shard-count marker holds no counts; it is damaged")
    return ShardCounts(**{name: int(count) for name, count in counts.items() if name in INDEXES})


class LiveShards:
    """One engine's copy of its store's layout, read again at least every ``refresh``
    seconds of engine time.

    ``current()`` is asked by every index write and read (never by a plain step, which
    writes no index item): once the copy is ``refresh`` old it reads the marker again inline,
    one consistent point read, before answering, so no item is keyed on a copy older than
    the bound. A failed read raises (a ``StorageError``) before anything is written; the next
    ask reads again. A change of counts waits ``refresh`` plus the longest invocation between
    phases (``settle``), so every engine has seen a phase before the next one begins.
    """

    def __init__(
        self,
        storage: Storage | None,
        layout: ShardLayout,
        clock: Callable[[], float],
        refresh: float = DEFAULT_REFRESH,
        read_at: float | None = None,
    ) -> None:
        self.storage = storage
        self.refresh = refresh
        self._clock = clock
        self._layout = layout
        self._read_at = clock() if read_at is None else read_at
        self._lock = threading.Lock()

    @classmethod
    def fixed(cls, layout: ShardLayout | None = None) -> LiveShards:
        """A layout never read again (no store behind it): tests and read-only tools."""
        return cls(None, layout or ShardLayout(), lambda: 0.0, math.inf, 0.0)

    def current(self) -> ShardLayout:
        """The layout, read again first when this copy is ``refresh`` old (or the clock went
        back behind the last read)."""
        now = self._clock()
        age = now - self._read_at
        if self.storage is not None and not 0.0 <= age < self.refresh:
            self.reread(now)
        return self._layout

    def reread(self, now: float | None = None) -> ShardLayout:
        """Read the marker now (``weft shards change`` and a phase change use it at once)."""
        moment = self._clock() if now is None else now
        assert self.storage is not None
        found = read_marker(self.storage)
        with self._lock:
            self._layout = ShardLayout() if found is None else found[0]
            self._read_at = moment
        return self._layout


def open_shards(
    storage: Storage, requested: ShardCounts | None, now: float, statuses: Iterable[str]
) -> ShardCounts:
    """The counts ``open_layout`` finds (during a change, the ones written now)."""
    return open_layout(storage, requested, now, statuses).write


def open_layout(
    storage: Storage, requested: ShardCounts | None, now: float, statuses: Iterable[str]
) -> ShardLayout:
    """The counts this engine must use on ``storage``, writing the marker on a new store.

    ``requested`` None adopts whatever the store has. A request that differs from the
    marker is refused (one layout per store; during a change, the counts it moves from or
    to); a request on a store without a marker is written only while no sharded index holds
    an item under the default counts (``statuses`` names the status index's partitions).
    """
    for _ in range(5):
        found = read_marker(storage)
        if found is not None:
            layout = found[0]
            if requested is not None and requested not in (layout.counts, layout.pending):
                raise ConfigurationError(
                    f"this engine asks for shards {requested.as_dict()} but the store was "
                    f"created with {layout.counts.as_dict()}; open it without shards= (or with "
                    "its counts): the counts of a store are chosen when it is created and "
                    "changed only by `weft shards change`"
                )
            return layout
        if requested is None:
            return ShardLayout()
        if requested == DEFAULT_SHARDS and not storage.capabilities().conditional_batch:
            return ShardLayout()
        if not storage.capabilities().conditional_batch:
            raise ConfigurationError(
                f"shards= needs a storage with conditional batches; "
                f"{type(storage).__name__} has none"
            )
        occupied = occupied_partition(storage, DEFAULT_SHARDS, statuses)
        if occupied is not None and requested != DEFAULT_SHARDS:
            raise ConfigurationError(
                f"this store already holds index items (in {occupied!r}) under the default "
                f"counts {DEFAULT_SHARDS.as_dict()}; shard counts are chosen when a store is "
                "created: create a new store with shards=, or open this one without it"
            )
        key = keys.meta_key(keys.LAYOUT)
        marker = marker_bytes(ShardLayout(requested), now)
        if storage.conditional_batch([Condition(key, None)], [Put(key, marker)]):
            return ShardLayout(requested)
    raise StorageError("could not write the store's shard-count marker; try again")


def occupied_partition(
    storage: Storage, shards: ShardCounts, statuses: Iterable[str]
) -> str | None:
    """The first partition of a sharded index that holds an item, None when all are empty.

    Every run has a status entry and every armed thing a timer; claims and events are the
    other indexes written without a run's status entry beside them. Attribute and tag items
    exist only beside a status entry.
    """
    partitions = [keys.timer_partition(s) for s in range(shards.timers)]
    partitions += [keys.claim_partition(s) for s in range(shards.claims)]
    partitions += [keys.outbox_partition(s) for s in range(shards.outbox)]
    partitions += [
        keys.status_partition(status, s) for status in statuses for s in range(shards.status)
    ]
    for partition in partitions:
        if next(iter(storage.scan(partition, limit=1)), None) is not None:
            return partition
    return None


def parse_shards(text: str) -> dict[str, int]:
    """Counts written as text (``WEFT_SHARDS``, ``weft dev --shards``): ``8`` for every
    index, or ``timers=16,claims=16`` for those named (the rest keep the default)."""
    try:
        if text.strip().isdigit():
            counts = dict.fromkeys(INDEXES, int(text))
        else:
            pairs = (part.split("=", 1) for part in text.split(","))
            counts = {name.strip(): int(value) for name, value in pairs}
    except ValueError:
        raise ConfigurationError(
            f"shard counts are written 8 (every index) or timers=16,claims=16, not {text!r}"
        ) from None
    check_shards(counts)
    return counts


def counts_for_new_store(
    storage: Storage, preferred: ShardCounts, statuses: Iterable[str]
) -> ShardCounts:
    """The counts to open ``storage`` with when a host prefers ``preferred`` for stores it
    creates but must keep serving stores created before (a deployment's defaults rising).

    A store with a marker keeps its counts; one without a marker that already holds index
    items keeps the defaults it was written under; only an empty store takes ``preferred``.
    """
    stored = read_shards(storage)
    if stored is not None:
        return stored
    if occupied_partition(storage, DEFAULT_SHARDS, statuses) is not None:
        return DEFAULT_SHARDS
    return preferred
