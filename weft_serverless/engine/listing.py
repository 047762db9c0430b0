"""Listing workflows from the sharded status index, oldest first, a page at a time.

Each status has its own index partitions, so listing one status reads only its shards. The
cursor is the sort key of the last row returned; the next page starts after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from weft_serverless.codec import decode
from weft_serverless.storage import keys

from .config import check_page
from .handle import WorkflowSummary
from .records import STATUSES
from .runtime import Runtime


def list_page(
    rt: Runtime,
    status: str | None,
    workflow_type: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[WorkflowSummary], str | None]:
    """Up to ``limit`` rows after ``cursor``, and the cursor of the next page (None: done)."""
    check_page(status, limit, cursor)
    statuses = [status] if status else list(STATUSES)
    streams = [
        _stream(rt, s, shard, cursor) for s in statuses for shard in range(keys.STATUS_SHARDS)
    ]
    rows: list[WorkflowSummary] = []
    last_sort: str | None = None
    for sort, row in heapq.merge(*streams, key=lambda pair: pair[0]):
        if workflow_type is not None and row.workflow_type != workflow_type:
            continue
        if len(rows) == limit:
            return rows, last_sort
        rows.append(row)
        last_sort = sort
    return rows, None


def _stream(
    rt: Runtime, status: str, shard: int, cursor: str | None
) -> Iterator[tuple[str, WorkflowSummary]]:
    partition = keys.status_partition(status, shard)
    for sort, value in rt.storage.scan(partition, gt=cursor):
        created = int(sort.split("#", 1)[0]) / 1000.0
        row = WorkflowSummary(keys.status_entry_id(sort), decode(value)["type"], status, created)
        yield sort, row


def all_ids(rt: Runtime, status: str) -> Iterator[str]:
    for shard in range(keys.STATUS_SHARDS):
        for sort, _ in rt.storage.scan(keys.status_partition(status, shard)):
            yield keys.status_entry_id(sort)
