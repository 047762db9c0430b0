"""A store's shard counts: checked, chosen once when the store is created, read at open.

Invariant (ADR 0050): every engine that serves a store uses the counts of its ``meta/shards``
marker, or the defaults when it has none; the marker is written only while the store holds
no item of any sharded index (so no entry was ever written under other counts), with a
condition that it is still absent, and never changed afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from weft_serverless.codec import decode_record, encode
from weft_serverless.errors import ConfigurationError, StorageError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Put, Storage
from weft_serverless.storage.keys.shards import DEFAULT_SHARDS, INDEXES, MAX_COUNT, ShardCounts


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


def read_shards(storage: Storage) -> ShardCounts | None:
    """The counts in the store's marker; None on a store created without one."""
    stored = storage.get(keys.meta_key(keys.LAYOUT))
    if stored is None:
        return None
    record = decode_record(stored, "the store's shard-count marker")
    counts = record.get("counts")
    if not isinstance(counts, dict):
        raise StorageError("the store's shard-count marker holds no counts; it is damaged")
    known = {name: int(count) for name, count in counts.items() if name in INDEXES}
    return ShardCounts(**known)


def open_shards(
    storage: Storage, requested: ShardCounts | None, now: float, statuses: Iterable[str]
) -> ShardCounts:
    """The counts this engine must use on ``storage``, writing the marker on a new store.

    ``requested`` None adopts whatever the store has. A request that differs from the
    marker is refused (one layout per store); a request on a store without a marker is
    written only while no sharded index holds an item under the default counts (``statuses``
    names the status index's partitions).
    """
    for _ in range(5):
        stored = read_shards(storage)
        if stored is not None:
            if requested is not None and requested != stored:
                raise ConfigurationError(
                    f"this engine asks for shards {requested.as_dict()} but the store was "
                    f"created with {stored.as_dict()}; open it without shards= (or with its "
                    "counts): the counts of a store are chosen when it is created"
                )
            return stored
        if requested is None:
            return DEFAULT_SHARDS
        if requested == DEFAULT_SHARDS and not storage.capabilities().conditional_batch:
            return DEFAULT_SHARDS
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
        marker = encode({"counts": requested.as_dict(), "established_at": now})
        if storage.conditional_batch([Condition(key, None)], [Put(key, marker)]):
            return requested
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
