"""The conformance suite's shared vocabulary: the test partition, bulk fill, scan-to-sorts.

Kept apart from the sections so each section module imports it without importing the harness
(``conformance``), which imports every section.
"""

from __future__ import annotations

from collections.abc import Iterable

from weft_serverless.storage.base import Key, Op, Put, Storage

P = "p"


def fill(storage: Storage, partition: str, items: Iterable[tuple[str, bytes]]) -> None:
    """Write ``(sort, value)`` pairs in batches no bigger than the backend allows."""
    size = storage.capabilities().max_batch_ops
    chunk: list[Op] = []
    for sort, value in items:
        chunk.append(Put(Key(partition, sort), value))
        if len(chunk) == size:
            storage.batch(chunk)
            chunk = []
    storage.batch(chunk)


def sorts(
    storage: Storage,
    prefix: str = "",
    *,
    gt: str | None = None,
    gte: str | None = None,
    lt: str | None = None,
    lte: str | None = None,
    limit: int | None = None,
    reverse: bool = False,
) -> list[str]:
    """The sort keys a scan of partition ``P`` yields, in the order it yields them."""
    pairs = storage.scan(P, prefix, gt=gt, gte=gte, lt=lt, lte=lte, limit=limit, reverse=reverse)
    return [sort for sort, _ in pairs]
