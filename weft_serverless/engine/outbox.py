"""The events outbox: terminal and failure events written with their change, published later.

Writing: ``item`` is one more put in a batch that already holds several items (a terminal
move, a retry record with its timer, a dead letter with its teardown record), so it never
turns a single-item write into a transaction; without an event sink nothing is written.

Publishing (``publish``, called by every maintenance pass when a sink is configured): read
each outbox shard oldest first, hand the events to the sink in calls within its limits,
delete the accepted ones and keep the refused ones for the next pass. A crash between the
sink's answer and the delete publishes the same event again with the same ``event_id``: at
least once. Nothing is published by a deposed engine (ADR 0032): an event exists only if the
batch reporting it committed, and that batch carried its writer's fence; under ``lease`` the
pass also proves it still holds the store lease right before calling the sink, and its
deletes carry the lease fence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weft_serverless.codec import decode_record, encode
from weft_serverless.errors import UnsupportedSchemaVersionError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put

from .runtime import Runtime, logger
from .telemetry import skip_unsupported

MAX_EVENTS_PER_PASS = 100
"""Events one pass reads per shard; the rest wait for the next pass."""


def item(rt: Runtime, event: Mapping[str, Any]) -> list[Op]:
    """The outbox put for ``event`` (none without a sink)."""
    if rt.events is None:
        return []
    key = keys.outbox_key(float(event["at"]), str(event["workflow_id"]), str(event["event_id"]))
    return [Put(key, encode({"event": dict(event)}))]


def publish(rt: Runtime) -> dict[str, int]:
    """Publish what the outbox holds; returns counts for the maintenance report."""
    sink = rt.events
    if sink is None:
        return {}
    pending: list[tuple[Key, dict[str, Any]]] = []
    for shard in range(keys.OUTBOX_SHARDS):
        partition = keys.outbox_partition(shard)
        for sort, value in rt.storage.scan(partition, limit=MAX_EVENTS_PER_PASS):
            try:
                record = decode_record(value, f"outbox item {sort!r}")
            except UnsupportedSchemaVersionError as exc:
                skip_unsupported(rt.metrics, exc)
                continue
            pending.append((Key(partition, sort), record["event"]))
    if not pending:
        return {}
    rt.fence.check_store_fence()  # a deposed lease holder stops here, before publishing
    published: list[Key] = []
    failed = 0
    for chunk in _calls(sink.max_batch, sink.max_bytes, pending, sink.size_of):
        try:
            accepted = sink.publish([event for _, event in chunk])
        except Exception as exc:  # the sink's transport: keep every event for the next pass
            logger.warning("events: publishing %d event(s) failed: %s", len(chunk), exc)
            failed += len(chunk)
            continue
        for (key, _), ok in zip(chunk, accepted, strict=True):
            if ok:
                published.append(key)
            else:
                failed += 1
    _delete(rt, published)
    rt.metrics.incr("events_published", len(published))
    if failed:
        rt.metrics.incr("events_publish_failed", failed)
    return {"events_published": len(published), "events_kept": failed}


def _calls(
    max_batch: int,
    max_bytes: int,
    pending: list[tuple[Key, dict[str, Any]]],
    size_of: Any,
) -> list[list[tuple[Key, dict[str, Any]]]]:
    """Split the events into sink calls of at most ``max_batch`` events and ``max_bytes``."""
    calls: list[list[tuple[Key, dict[str, Any]]]] = []
    current: list[tuple[Key, dict[str, Any]]] = []
    size = 0
    for entry in pending:
        entry_size = int(size_of(entry[1]))
        if current and (len(current) >= max_batch or size + entry_size > max_bytes):
            calls.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry_size
    if current:
        calls.append(current)
    return calls


def _delete(rt: Runtime, published: list[Key]) -> None:
    """Delete the published items, under the pass's fence when the mode has one."""
    fence: list[Condition] = rt.fence.external_conditions()
    if not fence:
        rt.storage.delete_many(published)
        return
    size = rt.storage.capabilities().max_batch_ops - len(fence)
    for start in range(0, len(published), size):
        chunk: list[Op] = [Delete(key) for key in published[start : start + size]]
        if not rt.storage.conditional_batch(fence, chunk):
            rt.fence.on_lost_commit(chunk[0].key.partition)
