"""The storage contract every backend implements: ordered, partitioned, conditional key-value.

The public methods live here and own the invariants (key validity, batch and value limits,
request counting); a backend fills only the underscore primitives. Limits are checked before
anything is sent, so a refused request never half-applies.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

from weft_serverless.errors import InvalidArgumentError, InvalidKeyError, StorageLimitError

Persistence = Literal["ephemeral", "local", "remote"]


@dataclass(frozen=True, order=True, slots=True)
class Key:
    """A storage key: ``partition`` groups records read together, ``sort`` orders them."""

    partition: str
    sort: str


@dataclass(frozen=True, slots=True)
class Put:
    key: Key
    value: bytes


@dataclass(frozen=True, slots=True)
class Delete:
    key: Key


Op = Put | Delete


@dataclass(frozen=True, slots=True)
class Condition:
    """Holds when the stored value equals ``expected`` byte for byte; ``None`` means absent."""

    key: Key
    expected: bytes | None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend promises; the engine sizes its batches and payloads from it."""

    max_batch_ops: int
    max_value_bytes: int
    max_partition_bytes: int
    max_sort_bytes: int
    conditional_batch: bool
    atomic_batch: bool
    persistence: Persistence
    cheap_multi_item_batch: bool = False
    """A conditional batch of several items costs what a single-item write costs (one
    commit, one fsync), so two writes that may land together are cheaper as one batch.
    False where each item of a batch is billed extra (a DynamoDB transaction bills every
    item twice, where two single-item puts bill each once): there, separate writes stay
    cheaper, and the engine sends them apart."""
    concurrent_requests: bool = False
    """Each request is a network round trip, and several may be in flight at once: the engine
    sends independent writes side by side rather than one after the other (ADR 0057). False
    where a request costs no wait worth overlapping (memory, a local SQLite file)."""


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """The store's clock minus this process's wall clock (``time.time()``), in seconds.

    Known only within bounds (a clock read over a network is): the true offset lies between
    ``low`` and ``high``.
    """

    low: float
    high: float


@dataclass(slots=True)
class StorageStats:
    """Request counters, so cost per step is measurable on any backend."""

    gets: int = 0
    scans: int = 0
    scanned_items: int = 0
    batches: int = 0
    conditional_batches: int = 0
    conditional_failures: int = 0
    items_written: int = 0
    items_deleted: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def requests(self) -> int:
        return self.gets + self.scans + self.batches + self.conditional_batches

    def snapshot(self) -> dict[str, int]:
        """Every counter, read together under the lock, plus the total of requests."""
        with self._lock:
            counts = {name: getattr(self, name) for name in _COUNTERS}
            counts["requests"] = self.requests()
        return counts

    def reset(self) -> None:
        with self._lock:
            for name in _COUNTERS:
                setattr(self, name, 0)


_COUNTERS = tuple(f.name for f in fields(StorageStats) if not f.name.startswith("_"))


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None: unbounded)."""
    chars = list(prefix)
    while chars:
        last = ord(chars[-1])
        if last < 0x7F:
            chars[-1] = chr(last + 1)
            return "".join(chars)
        chars.pop()
    return None


@dataclass(frozen=True, slots=True)
class SortRange:
    """A scan range normalised from a prefix and bounds; each side is inclusive or strict."""

    low: str | None
    low_inclusive: bool
    high: str | None
    high_inclusive: bool

    def contains(self, sort: str) -> bool:
        if self.low is not None and (
            sort < self.low or (sort == self.low and not self.low_inclusive)
        ):
            return False
        return not (
            self.high is not None
            and (sort > self.high or (sort == self.high and not self.high_inclusive))
        )


def sort_range(
    prefix: str, gt: str | None, gte: str | None, lt: str | None, lte: str | None
) -> SortRange:
    """Intersect a prefix with explicit bounds into one range (the tightest of each side)."""
    low: str | None = prefix or None
    low_inc = True
    for bound, inclusive in ((gte, True), (gt, False)):
        if bound is not None and (low is None or bound > low or (bound == low and not inclusive)):
            low, low_inc = bound, inclusive
    high = prefix_end(prefix) if prefix else None
    high_inc = False
    for bound, inclusive in ((lte, True), (lt, False)):
        if bound is not None and (
            high is None or bound < high or (bound == high and not inclusive)
        ):
            high, high_inc = bound, inclusive
    return SortRange(low, low_inc, high, high_inc)


class Storage(ABC):
    """Ordered key-value storage with atomic conditional batches (see DESIGN.md section 4)."""

    def __init__(self) -> None:
        self.stats = StorageStats()

    # -- public contract -------------------------------------------------------------------

    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    def get(self, key: Key) -> bytes | None:
        """Strongly consistent point read."""
        self._check_key(key)
        with self.stats._lock:
            self.stats.gets += 1
        return self._get(key)

    def put(self, key: Key, value: bytes) -> None:
        self.batch([Put(key, value)])

    def delete(self, key: Key) -> None:
        """Delete one key; deleting a missing key is a no-op."""
        self.batch([Delete(key)])

    def scan(
        self,
        partition: str,
        prefix: str = "",
        *,
        gt: str | None = None,
        gte: str | None = None,
        lt: str | None = None,
        lte: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:
        """Yield ``(sort, value)`` pairs of one partition in sort order, lazily.

        The prefix and the bounds intersect; ``gt``/``lt`` are strict, ``gte``/``lte``
        inclusive; ``limit`` caps the pairs yielded; ``reverse`` walks from the top.
        """
        _check_part(partition, "partition", self.capabilities().max_partition_bytes, partition)
        if limit is not None and limit < 0:
            raise InvalidArgumentError(f"scan limit must be >= 0, got {limit}")
        if limit == 0:
            return iter(())
        rng = sort_range(prefix, gt, gte, lt, lte)
        with self.stats._lock:
            self.stats.scans += 1
        return self._counted(self._scan(partition, rng, limit, reverse))

    def batch(self, ops: Sequence[Op]) -> None:
        """Apply puts and deletes atomically (all or nothing); an empty batch is a no-op."""
        if not ops:
            return
        self._check_batch((), ops)
        self._count_writes(ops)
        self._batch(ops)

    def conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        """Apply ``ops`` only if every condition holds; return whether they were applied."""
        caps = self.capabilities()
        if not caps.conditional_batch:
            raise InvalidArgumentError(
                f"{type(self).__name__} does not support conditional batches"
            )
        if not conditions:
            self.batch(ops)
            return True
        self._check_batch(conditions, ops, caps)
        ok = self._conditional_batch(conditions, ops)
        with self.stats._lock:
            self.stats.conditional_batches += 1
            if ok:
                self._count_items(ops)
            else:
                self.stats.conditional_failures += 1
        return ok

    def delete_many(self, keys: Iterable[Key]) -> int:
        """Delete keys in chunks, NOT atomically as a whole; returns how many were requested.

        Every key is checked before anything is deleted; duplicates are dropped.
        """
        unique = list(dict.fromkeys(keys))
        caps = self.capabilities()
        for key in unique:
            self._check_key(key, caps)
        self._delete_many(unique)
        return len(unique)

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release connections; the object must not be used afterwards."""

    def clock_offset(self) -> ClockOffset | None:
        """How far the store's clock is from this process's, for backends that have one.

        Optional capability: ``None`` means the store has no clock of its own (memory, a
        local file), so engines sharing it share this machine's clock. A remote store answers
        from what its recent responses said, making a request only when none did lately.
        """
        return None

    # -- backend primitives ----------------------------------------------------------------

    @abstractmethod
    def _get(self, key: Key) -> bytes | None: ...

    @abstractmethod
    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]: ...

    @abstractmethod
    def _batch(self, ops: Sequence[Op]) -> None: ...

    @abstractmethod
    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool: ...

    def _delete_many(self, keys: list[Key]) -> None:
        """Bulk delete of checked, distinct keys; by default in atomic chunks of the batch size."""
        size = self.capabilities().max_batch_ops
        for start in range(0, len(keys), size):
            chunk: list[Op] = [Delete(key) for key in keys[start : start + size]]
            self._count_writes(chunk)
            self._batch(chunk)

    # -- invariants --------------------------------------------------------------------------

    def _check_key(self, key: Key, caps: Capabilities | None = None) -> None:
        caps = caps or self.capabilities()
        _check_part(key.partition, "partition", caps.max_partition_bytes, key)
        _check_part(key.sort, "sort", caps.max_sort_bytes, key)

    def _check_batch(
        self, conditions: Sequence[Condition], ops: Sequence[Op], caps: Capabilities | None = None
    ) -> None:
        # Every step commit passes here: each key is checked once (a condition on a key the
        # batch writes is already checked), and a set finds repeats only where there can be
        # some (a step's bare commit is one write and one condition on its key).
        caps = caps or self.capabilities()
        op_keys: set[Key] = set()
        for op in ops:
            key = op.key
            if not _key_fits(key, caps):
                self._check_key(key, caps)
            if len(ops) > 1:
                count = len(op_keys)
                op_keys.add(key)
                if len(op_keys) == count:
                    raise InvalidArgumentError(f"a batch writes key {key!r} twice")
            if isinstance(op, Put):
                if not isinstance(op.value, bytes | bytearray | memoryview):
                    raise InvalidArgumentError(f"value for {key!r} must be bytes")
                if len(op.value) > caps.max_value_bytes:
                    raise StorageLimitError(
                        "value size", len(op.value), caps.max_value_bytes, f"key {key!r}"
                    )
        # ``in`` a one-key tuple compares by identity first: no hash, usually no __eq__.
        written: Collection[Key] = (ops[0].key,) if len(ops) == 1 else op_keys
        cond_keys: set[Key] = set()
        touched = len(ops)
        for cond in conditions:
            key = cond.key
            if key not in written:
                if not _key_fits(key, caps):
                    self._check_key(key, caps)
                touched += 1
            if len(conditions) > 1:
                count = len(cond_keys)
                cond_keys.add(key)
                if len(cond_keys) == count:
                    raise InvalidArgumentError(f"a batch has two conditions on key {key!r}")
        if touched > caps.max_batch_ops:
            raise StorageLimitError("atomic batch actions", touched, caps.max_batch_ops)

    def _count_writes(self, ops: Sequence[Op]) -> None:
        with self.stats._lock:
            self.stats.batches += 1
            self._count_items(ops)

    def _count_items(self, ops: Sequence[Op]) -> None:
        for op in ops:
            if isinstance(op, Put):
                self.stats.items_written += 1
            else:
                self.stats.items_deleted += 1

    def _counted(self, pairs: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
        for pair in pairs:
            with self.stats._lock:
                self.stats.scanned_items += 1
            yield pair


def _key_fits(key: Key, caps: Capabilities) -> bool:
    """Whether ``key`` is valid for a backend of ``caps`` (``_check_key`` says what is not)."""
    partition, sort = key.partition, key.sort
    return bool(
        partition
        and sort
        and partition.isascii()
        and sort.isascii()
        and len(partition) <= caps.max_partition_bytes
        and len(sort) <= caps.max_sort_bytes
    )


def _check_part(part: str, name: str, maximum: int, where: object) -> None:
    """A key part (partition or sort) must be non-empty ASCII within the backend's length."""
    if not part:
        raise InvalidKeyError(f"key {name} must not be empty ({where!r})")
    if not part.isascii():
        raise InvalidKeyError(f"key {name} must be ASCII ({where!r})")
    if len(part) > maximum:
        raise InvalidKeyError(
            f"key {name} is {len(part)} bytes, over this backend's {maximum} ({where!r})"
        )
