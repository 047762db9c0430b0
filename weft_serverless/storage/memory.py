"""An in-process backend for tests and examples: nothing survives the process.

Each partition keeps a dict of values plus a sorted list of its sort keys, so a point read is
O(1) and a range scan is a bisect plus the slice it returns. One lock guards everything, which
makes every batch trivially atomic and keeps the reference semantics easy to trust.
"""

from __future__ import annotations

import dataclasses
import threading
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from weft_serverless.errors import InvalidArgumentError
from weft_serverless.storage.base import (
    Capabilities,
    Condition,
    Key,
    Op,
    Put,
    SortRange,
    Storage,
)

_CAPABILITIES = Capabilities(
    max_batch_ops=10_000,
    max_value_bytes=4 * 1024 * 1024,
    max_partition_bytes=1024,
    max_sort_bytes=1024,
    conditional_batch=True,
    atomic_batch=True,
    persistence="ephemeral",
    # A write here costs next to nothing, so folding two into one batch saves nothing; the
    # store sends them apart, as DynamoDB's shape is, and keeps that path under test.
    cheap_multi_item_batch=False,
)


@dataclass(slots=True)
class _Partition:
    sorts: list[str] = field(default_factory=list)
    values: dict[str, bytes] = field(default_factory=dict)


class MemoryStorage(Storage):
    """Ephemeral storage with the full contract, including conditional batches.

    Scans are snapshots: the matching slice is copied under the lock when ``scan`` is
    called, so writes made while a caller iterates are not seen and cannot break iteration.
    Copying is cheap because values are immutable ``bytes`` shared by reference.
    """

    def __init__(self, *, max_batch_ops: int = _CAPABILITIES.max_batch_ops) -> None:
        """``max_batch_ops`` lowers the batch limit, to test a store with DynamoDB's 100."""
        super().__init__()
        if max_batch_ops < 2:
            raise InvalidArgumentError("max_batch_ops must be at least 2", "max_batch_ops")
        self._capabilities = dataclasses.replace(_CAPABILITIES, max_batch_ops=max_batch_ops)
        self._lock = threading.Lock()
        self._partitions: dict[str, _Partition] = {}

    def capabilities(self) -> Capabilities:
        return self._capabilities

    def _get(self, key: Key) -> bytes | None:
        with self._lock:
            return self._read(key)

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        with self._lock:
            part = self._partitions.get(partition)
            if part is None:
                return iter(())
            lo, hi = _bounds(part.sorts, rng)
            if lo >= hi:
                return iter(())
            if limit is not None:
                if reverse:
                    lo = max(lo, hi - limit)
                else:
                    hi = min(hi, lo + limit)
            sorts = part.sorts[lo:hi]
            if reverse:
                sorts.reverse()
            values = list(map(part.values.__getitem__, sorts))
        return zip(sorts, values, strict=True)

    def _batch(self, ops: Sequence[Op]) -> None:
        with self._lock:
            self._apply(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        with self._lock:
            if any(self._read(cond.key) != cond.expected for cond in conditions):
                return False
            self._apply(ops)
            return True

    # -- helpers; callers hold the lock ----------------------------------------------------

    def _read(self, key: Key) -> bytes | None:
        part = self._partitions.get(key.partition)
        return None if part is None else part.values.get(key.sort)

    def _apply(self, ops: Sequence[Op]) -> None:
        for op in ops:
            key = op.key
            if isinstance(op, Put):
                part = self._partitions.setdefault(key.partition, _Partition())
                if key.sort not in part.values:
                    insort(part.sorts, key.sort)
                # Copy, so a caller mutating its bytearray afterwards cannot change stored data.
                part.values[key.sort] = bytes(op.value)
                continue
            existing = self._partitions.get(key.partition)
            if existing is None or existing.values.pop(key.sort, None) is None:
                continue
            del existing.sorts[bisect_left(existing.sorts, key.sort)]
            if not existing.values:
                del self._partitions[key.partition]


def _bounds(sorts: list[str], rng: SortRange) -> tuple[int, int]:
    """The half-open index slice of ``sorts`` that ``rng`` selects."""
    lo = 0
    if rng.low is not None:
        lo = (bisect_left if rng.low_inclusive else bisect_right)(sorts, rng.low)
    hi = len(sorts)
    if rng.high is not None:
        hi = (bisect_right if rng.high_inclusive else bisect_left)(sorts, rng.high)
    return lo, hi
