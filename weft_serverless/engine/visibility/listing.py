"""Listing and counting workflows from the index, a page at a time (ADR 0030).

One index drives a read: a tag's items, else an attribute's items for one value (``==``) or a
few (``in``), else the sharded status entries. Every index sort key ends in ``created#id``, so
each partition read is in start order and the shards merge by that tail; the started-after
and started-before bounds become key bounds. The other filters are applied to the items read
(each item holds type, status, attributes and tags), which is what they cost. The cursor is
the ``created#id`` of the last row returned; the next page starts after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from weft_serverless.engine.config import check_page
from weft_serverless.engine.handle import WorkflowSummary
from weft_serverless.engine.persistence.index_entries import decode_item
from weft_serverless.engine.persistence.records import STATUSES
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.visibility.filters import GROUPS, Filter
from weft_serverless.errors import InvalidFilterError
from weft_serverless.search_attributes import value_token
from weft_serverless.storage import keys
from weft_serverless.storage.keys.shards import ShardCounts

_MAX_CHUNK = 1000
Row = tuple[str, WorkflowSummary]


def list_page(
    rt: Runtime, where: Filter, limit: int, cursor: str | None
) -> tuple[list[WorkflowSummary], str | None]:
    """Up to ``limit`` rows after ``cursor``, and the cursor of the next page (None: done)."""
    check_page(where.status, limit, cursor)
    rows: list[WorkflowSummary] = []
    last: str | None = None
    for suffix, row in _rows(rt, where, cursor, limit + 1):
        if len(rows) == limit:
            return rows, last
        rows.append(row)
        last = suffix
    return rows, None


def counted_page(
    rt: Runtime, where: Filter, limit: int, cursor: str | None
) -> tuple[list[WorkflowSummary], str | None, dict[str, int]]:
    """``list_page`` and the runs per status under every filter but the status, from one
    read of the index entries the counts need: a page beside its status counts (the
    console's runs page, every few seconds) reads each status partition once, not twice.
    Each partition keeps the ``limit + 1`` entries a page can take after the cursor; only
    those are decoded, unless a filter lives in the items."""
    check_page(where.status, limit, cursor)
    counting = replace(where, status=None)
    keys_only = _keys_decide(counting)
    newest = where.order == "newest"
    counts: dict[str, int] = {}
    streams: list[list[tuple[str, bytes, str]]] = []
    by_key = counting.started_after, counting.started_before, counting.id_prefix
    for partition, prefix, status in _sources(rt.shards_to_read, counting):
        low, high = _bounds(counting, prefix, None)
        keeper = _Keeper(limit, cursor, newest)
        entries = rt.storage.scan(partition, prefix, gt=low, lt=high)
        cut = len(prefix)
        if keys_only and status is not None:  # the hot path: nothing decoded, one count
            found, wanted = 0, where.status is None or where.status == status
            for sort, value in entries:
                suffix = sort[cut:]
                if by_key != (None, None, None) and not _key_passes(counting, suffix):
                    continue
                found += 1
                if wanted:
                    wanted = keeper.offer(suffix, value, status)
            if found:
                counts[status] = counts.get(status, 0) + found
        else:
            for sort, value in entries:
                row = _row(counting, sort[cut:], value, status)
                if row is None:
                    continue
                counts[row[1].status] = counts.get(row[1].status, 0) + 1
                if where.status is None or where.status == row[1].status:
                    keeper.offer(row[0], value, row[1].status)
        streams.append(keeper.entries())
    merged = heapq.merge(*streams, key=lambda entry: entry[0], reverse=newest)
    rows: list[WorkflowSummary] = []
    last: str | None = None
    for suffix, value, status in merged:
        if len(rows) == limit:
            return rows, last, counts
        found_row = _row(where, suffix, value, status)
        if found_row is not None:
            rows.append(found_row[1])
            last = suffix
    return rows, None, counts


def _key_passes(where: Filter, suffix: str) -> bool:
    """Whether a status entry passes ``where`` by its key alone (see ``_keys_decide``)."""
    return _in_window(where, suffix) and (
        where.id_prefix is None or keys.status_entry_id(suffix).startswith(where.id_prefix)
    )


class _Keeper:
    """The ``limit + 1`` entries of one partition, offered in key order, that a page can
    take after ``cursor``: the first ones above it, or (newest first) the last ones below."""

    def __init__(self, limit: int, cursor: str | None, newest: bool) -> None:
        self.size, self.cursor, self.newest = limit + 1, cursor, newest
        self.kept: list[tuple[str, bytes, str]] = []

    def offer(self, suffix: str, value: bytes, status: str) -> bool:
        """Keep the entry if a page can take it; False once no later entry can be."""
        cursor, kept = self.cursor, self.kept
        if self.newest:
            if cursor is not None and suffix >= cursor:
                return False
            kept.append((suffix, value, status))
            if len(kept) >= 4 * self.size:  # trimmed now and then: memory stays bounded
                del kept[: -self.size]
            return True
        if cursor is None or suffix > cursor:
            kept.append((suffix, value, status))
        return len(kept) < self.size

    def entries(self) -> list[tuple[str, bytes, str]]:
        """The kept entries in the page's order."""
        return self.kept[: -self.size - 1 : -1] if self.newest else self.kept


def count(rt: Runtime, where: Filter, group_by: str) -> dict[Any, int]:
    """How many runs pass ``where``, per value of ``group_by`` (a run without the attribute
    counts under ``None``). It reads every matching index item: its cost grows with them."""
    if not isinstance(group_by, str) or not group_by:
        raise InvalidFilterError(
            f"group_by is one of {', '.join(GROUPS)} or a search attribute name", "group_by"
        )
    if group_by == "status" and _keys_decide(where):
        return _count_keys(rt, where)
    counts: dict[Any, int] = {}
    for _, row in _rows(rt, where, None, _MAX_CHUNK):
        if group_by == "status":
            group: Any = row.status
        elif group_by == "workflow_type":
            group = row.workflow_type
        else:
            group = row.search_attributes.get(group_by)
        counts[group] = counts.get(group, 0) + 1
    return counts


def _keys_decide(where: Filter) -> bool:
    """Whether a status entry's key alone says if the run passes ``where``: its partition
    names the status, its sort key the start time and the id; type, tags and attributes
    are only in the item."""
    return (
        where.workflow_type is None
        and where.type_prefix is None
        and not where.terms
        and not where.tags
    )


def _count_keys(rt: Runtime, where: Filter) -> dict[Any, int]:
    """Runs per status from the status entries' keys, none decoded: what the runs page asks
    every few seconds costs a key read per run, not a decode and a merge (ADR 0034)."""
    counts: dict[Any, int] = {}
    for partition, prefix, status in _sources(rt.shards_to_read, where):
        low, high = _bounds(where, prefix, None)
        found = 0
        for sort, _ in rt.storage.scan(partition, prefix, gt=low, lt=high):
            suffix = sort[len(prefix) :]
            if _in_window(where, suffix) and (
                where.id_prefix is None or keys.status_entry_id(suffix).startswith(where.id_prefix)
            ):
                found += 1
        if found:
            counts[status] = counts.get(status, 0) + found
    return counts


def _in_window(where: Filter, suffix: str) -> bool:
    """Whether the start time in a ``created#id`` sort suffix is inside ``where``'s window."""
    if where.started_after is None and where.started_before is None:
        return True
    created_ms = int(suffix.split("#", 1)[0])
    if where.started_after is not None and created_ms < keys.ms(where.started_after):
        return False
    return where.started_before is None or created_ms < keys.ms(where.started_before)


def _rows(rt: Runtime, where: Filter, cursor: str | None, chunk: int) -> Iterator[Row]:
    newest = where.order == "newest"
    streams = [
        _stream(rt, where, partition, prefix, status, cursor, chunk)
        for partition, prefix, status in _sources(rt.shards_to_read, where)
    ]
    yield from heapq.merge(*streams, key=lambda pair: pair[0], reverse=newest)


def _sources(counts: ShardCounts, where: Filter) -> list[tuple[str, str, str | None]]:
    """The partitions (with the sort prefix to read and the status they imply) one read
    drives from: the most selective index the filter allows."""
    shards = range(counts.visibility)
    if where.tags:
        prefix = keys.enc(where.tags[0]) + "#"
        return [(keys.tag_partition(s), prefix, None) for s in shards]
    for op in ("==", "in"):
        for term in where.terms:
            if term.op == op:
                values = term.value if op == "in" else (term.value,)
                return [
                    (keys.attribute_partition(term.name, s), value_token(v) + "#", None)
                    for v in values
                    for s in shards
                ]
    statuses = [where.status] if where.status else list(STATUSES)
    return [
        (keys.status_partition(status, s), "", status)
        for status in statuses
        for s in range(counts.status)
    ]


def _stream(
    rt: Runtime,
    where: Filter,
    partition: str,
    prefix: str,
    status: str | None,
    cursor: str | None,
    chunk: int,
) -> Iterator[Row]:
    """Matching rows of one partition in ``created#id`` order (reversed for newest), read in
    chunks that start at one page and grow, so a page costs reads in proportion to it."""
    low, high = _bounds(where, prefix, cursor)
    reverse = where.order == "newest"
    size = max(1, min(chunk, _MAX_CHUNK))
    while True:
        read = 0
        for sort, value in rt.storage.scan(
            partition, prefix, gt=low, lt=high, limit=size, reverse=reverse
        ):
            read += 1
            if reverse:
                high = sort
            else:
                low = sort
            row = _row(where, sort[len(prefix) :], value, status)
            if row is not None:
                yield row
        if read < size:
            return
        size = min(size * 2, _MAX_CHUNK)


def _bounds(where: Filter, prefix: str, cursor: str | None) -> tuple[str | None, str | None]:
    """Strict low and high sort bounds from the cursor and the start-time window."""
    low = high = None
    if where.started_after is not None:
        # ``gt`` the last key before the window: every key there sorts after ``{ms - 1}#~``.
        low = f"{prefix}{keys.ms(where.started_after) - 1:016d}#~"
    if where.started_before is not None:
        high = f"{prefix}{keys.ms(where.started_before):016d}"
    if cursor is not None:
        at = prefix + cursor
        if where.order == "newest":
            high = at if high is None else min(high, at)
        else:
            low = at if low is None else max(low, at)
    return low, high


def _row(where: Filter, suffix: str, value: bytes, status: str | None) -> Row | None:
    item = decode_item(value)
    workflow_id = keys.status_entry_id(suffix)
    run_status = status or item.get("status", "")
    if not where.matches(item, run_status, workflow_id):
        return None
    if not _in_window(where, suffix):
        return None
    created = int(suffix.split("#", 1)[0]) / 1000.0
    summary = WorkflowSummary(
        workflow_id,
        item["type"],
        run_status,
        created,
        dict(item.get("sa") or {}),
        tuple(item.get("tags") or ()),
    )
    return suffix, summary


def all_ids(rt: Runtime, status: str) -> Iterator[str]:
    for shard in range(rt.shards_to_read.status):
        for sort, _ in rt.storage.scan(keys.status_partition(status, shard)):
            yield keys.status_entry_id(sort)
