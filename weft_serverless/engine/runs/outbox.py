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

An event the sink refuses entry by entry counts a try in its outbox item; at
``MAX_PUBLISH_TRIES`` (or at once when it is larger than one call may carry) it moves to the
event dead letters, in one conditional write that removes it from the outbox, so no pass
offers it again (ADR 0043). A call that fails as a whole (the network, a throttled or
unreachable bus) counts no try: it says nothing about any one event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weft_serverless.codec import decode_record, encode
from weft_serverless.engine.process.telemetry import skip_unsupported
from weft_serverless.engine.runs.commit import delete_fenced, write
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.errors import UnsupportedSchemaVersionError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put
from weft_serverless.storage.keys.shards import EVERY_SHARD, Share

MAX_EVENTS_PER_PASS = 100
"""Events one pass reads per shard; the rest wait for the next pass."""
MAX_PUBLISH_TRIES = 10
"""Refusals of one event by the sink before it moves to the dead letters: at one pass a
minute, ten minutes of a bus refusing that entry and no other, well past a throttling burst."""

Pending = tuple[Key, bytes, dict[str, Any]]
"""An outbox item as read: its key, its stored bytes (the condition of any change) and its
record (``event``, and ``tries``/``error`` once refused)."""


def item(rt: Runtime, event: Mapping[str, Any]) -> list[Op]:
    """The outbox put for ``event`` (none without a sink)."""
    if rt.events is None:
        return []
    key = keys.outbox_key(
        rt.shards, float(event["at"]), str(event["workflow_id"]), str(event["event_id"])
    )
    return [Put(key, encode({"event": dict(event)}))]


def publish(rt: Runtime, share: Share = EVERY_SHARD) -> dict[str, int]:
    """Publish what the outbox holds; returns counts for the maintenance report."""
    sink = rt.events
    if sink is None:
        return {}
    pending: list[Pending] = []
    for shard in share.of(rt.shards_to_read.outbox):
        partition = keys.outbox_partition(shard)
        for sort, value in rt.storage.scan(partition, limit=MAX_EVENTS_PER_PASS):
            try:
                record = decode_record(value, f"outbox item {sort!r}")
            except UnsupportedSchemaVersionError as exc:
                skip_unsupported(rt.metrics, exc)
                continue
            pending.append((Key(partition, sort), value, record))
    if not pending:
        return {}
    rt.fence.check_store_fence()  # a deposed lease holder stops here, before publishing
    published: list[Key] = []
    refused: list[tuple[Pending, str, bool]] = []  # (item, why, refused for good)
    fits: list[tuple[Pending, int]] = []
    for entry in pending:
        size = int(sink.size_of(entry[2]["event"]))
        if size > sink.max_bytes:  # no call may carry it: refused for good, tried never
            why = f"{size} bytes, over the {sink.max_bytes} one call may carry"
            refused.append((entry, why, True))
        else:
            fits.append((entry, size))
    failed = 0
    for chunk in _calls(sink.max_batch, sink.max_bytes, fits):
        try:
            accepted = sink.publish([record["event"] for _, _, record in chunk])
        except Exception as exc:  # the sink's transport: keep every event for the next pass
            logger.warning("events: publishing %d event(s) failed: %s", len(chunk), exc)
            failed += len(chunk)
            continue
        for entry, ok in zip(chunk, accepted, strict=True):
            if ok:
                published.append(entry[0])
            else:
                refused.append((entry, "refused by the sink", False))
    delete_fenced(rt, published)  # under the pass's fence when the mode has one
    rt.metrics.incr("events_published", len(published))
    dead = sum(_refused(rt, entry, why, final) for entry, why, final in refused)
    failed += len(refused) - dead
    if failed:
        rt.metrics.incr("events_publish_failed", failed)
    counts = {"events_published": len(published), "events_kept": failed}
    if dead:
        rt.metrics.incr("events_dead_lettered", dead)
        counts["events_dead_lettered"] = dead
    return counts


def _refused(rt: Runtime, entry: Pending, why: str, final: bool) -> bool:
    """Count a refusal in the item, or move it to the dead letters once refused for good
    (``final``, or its ``MAX_PUBLISH_TRIES``-th); True when it moved. Either write is
    conditioned on the bytes read, so an item another pass published (deleted) or counted
    meanwhile is left to that pass."""
    key, value, record = entry
    now, event = rt.now(), record["event"]
    tries = int(record.get("tries", 0)) + (not final)
    first = record.get("first_refused_at", now)
    if tries < MAX_PUBLISH_TRIES and not final:
        update = {**record, "tries": tries, "error": why, "first_refused_at": first}
        write(rt, [Condition(key, value)], [Put(key, encode(update))])
        return False
    workflow_id, event_id = str(event["workflow_id"]), str(event["event_id"])
    letter_key = keys.event_dead_letter_key(workflow_id, now, event_id)
    letter = {"event": event, "tries": tries, "error": why, "first_refused_at": first, "at": now}
    moved = write(
        rt,
        [Condition(key, value), Condition(letter_key, None)],
        [Delete(key), Put(letter_key, encode(letter))],
    )
    if moved:
        logger.warning(
            "events: event %s (%s of workflow %s) dead-lettered after %d refusal(s): %s; "
            "Engine.list_event_dead_letters() lists it",
            event.get("event_id"),
            event.get("type"),
            event.get("workflow_id"),
            letter["tries"],
            why,
        )
    return moved


def dead_letters(rt: Runtime, workflow_id: str | None = None) -> list[dict[str, Any]]:
    """Events moved out of the outbox (of one workflow id, or all), by workflow id then time;
    each ``{event, tries, error, first_refused_at, at}``."""
    prefix = "" if workflow_id is None else keys.enc(workflow_id) + "#"
    return [
        dict(decode_record(value, f"event dead letter {sort!r}"))
        for sort, value in rt.storage.scan(keys.EVENT_DEAD_LETTER_PARTITION, prefix)
    ]


def _calls(
    max_batch: int, max_bytes: int, pending: list[tuple[Pending, int]]
) -> list[list[Pending]]:
    """Split the events (with their sizes) into sink calls of at most ``max_batch`` events
    and ``max_bytes``."""
    calls: list[list[Pending]] = []
    current: list[Pending] = []
    size = 0
    for entry, entry_size in pending:
        if current and (len(current) >= max_batch or size + entry_size > max_bytes):
            calls.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry_size
    if current:
        calls.append(current)
    return calls
