"""Hash-sharded global indexes written in the batch of the change they index: timers, the
status index and the claims held under workflow-lease."""

from __future__ import annotations

import math

from weft_serverless.storage.base import Key
from weft_serverless.storage.keys.encoding import dec, enc, ms, shard_of
from weft_serverless.storage.keys.shards import ShardCounts, ShardLayout

# -- timers ----------------------------------------------------------------------------------


def timer_partition(shard: int) -> str:
    return f"timers#{shard:02d}"


_FLOAT_NOISE_MS = 1e-3
"""Below a microsecond, a time is float rounding (``T + 0.4`` is not ``T`` plus exactly 0.4 s)."""


def due_ms(due: float) -> int:
    """The whole millisecond a due time falls due at: rounded up, float noise ignored."""
    return math.ceil(due * 1000 - _FLOAT_NOISE_MS)


def passed_ms(now: float) -> int:
    """The last whole millisecond ``now`` has reached: rounded down, float noise ignored."""
    return math.floor(now * 1000 + _FLOAT_NOISE_MS)


def is_due(now: float, due: float) -> bool:
    """Whether a step due at ``due`` has fallen due at ``now``.

    Steps and timers compare the same whole milliseconds, so advancing by exactly the
    duration a workflow asked for fires it, and a timer never fires before its step is due
    (a timer fired early would be deleted with its step still parked). A step is also due
    once ``now`` reaches ``due`` exactly, before its timer's rounded-up millisecond: a retry
    with no backoff runs at once instead of parking until the next millisecond (its timer
    then only wakes the run to find nothing to do).
    """
    return now >= due or passed_ms(now) >= due_ms(due)


def timer_key(shards: ShardCounts, due: float, workflow_id: str, tag: str) -> Key:
    """A due timer; ``tag`` tells timers of one workflow apart (e.g. ``s00000003``)."""
    shard = shard_of(workflow_id, shards.timers)
    return Key(timer_partition(shard), f"{due_ms(due):016d}#{enc(workflow_id)}#{tag}")


def timer_due_bound(now: float) -> str:
    """Sort keys strictly below this bound are due at ``now`` (see ``is_due``)."""
    return f"{passed_ms(now) + 1:016d}"


def timer_due_of(sort: str) -> float:
    return int(sort.split("#", 1)[0]) / 1000.0


def timer_owner_of(sort: str) -> str:
    """The id a timer's sort key names (a run's, a schedule's, a gate's, an operation's)."""
    return dec(sort.split("#", 2)[1])


def is_timer_partition(partition: str) -> bool:
    return partition.startswith("timers#")


def timer_moved(key: Key, due: float) -> Key:
    """The same timer (shard, workflow, tag) due at ``due`` instead."""
    return Key(key.partition, f"{math.ceil(due * 1000):016d}#{key.sort.split('#', 1)[1]}")


# -- status index ----------------------------------------------------------------------------


def status_partition(status: str, shard: int) -> str:
    return f"status#{status}#{shard:02d}"


def status_key(shards: ShardCounts, status: str, workflow_id: str, created_at: float) -> Key:
    shard = shard_of(workflow_id, shards.status)
    return Key(status_partition(status, shard), f"{ms(created_at):016d}#{enc(workflow_id)}")


def status_entry_id(sort: str) -> str:
    return dec(sort.split("#", 1)[1])


# -- visibility index (ADR 0030) -------------------------------------------------------------


def attribute_partition(name: str, shard: int) -> str:
    """Index items of search attribute ``name``; the sort starts with the value's token."""
    return f"sa#{enc(name)}#{shard:02d}"


def tag_partition(shard: int) -> str:
    """Index items of tags; the sort starts with the tag."""
    return f"tag#{shard:02d}"


def run_suffix(workflow_id: str, created_at: float) -> str:
    """``created#id``: the tail of every index sort key, and the list cursor's shape."""
    return f"{ms(created_at):016d}#{enc(workflow_id)}"


def attribute_key(
    shards: ShardCounts, name: str, token: str, workflow_id: str, created_at: float
) -> Key:
    shard = shard_of(workflow_id, shards.visibility)
    return Key(attribute_partition(name, shard), f"{token}#{run_suffix(workflow_id, created_at)}")


def tag_key(shards: ShardCounts, tag: str, workflow_id: str, created_at: float) -> Key:
    shard = shard_of(workflow_id, shards.visibility)
    return Key(tag_partition(shard), f"{enc(tag)}#{run_suffix(workflow_id, created_at)}")


# -- held workflow claims (workflow-lease) ---------------------------------------------------


def claim_partition(shard: int) -> str:
    return f"claims#{shard:02d}"


def claim_index_key(shards: ShardCounts, workflow_id: str) -> Key:
    """Lists claims held anywhere, so a maintenance pass can find expired ones to take over."""
    return Key(claim_partition(shard_of(workflow_id, shards.claims)), enc(workflow_id))


def claim_index_keys(layout: ShardLayout, workflow_id: str) -> list[Key]:
    """Where the claim index entry of ``workflow_id`` may sit: the written key first, then
    (while the counts change) the other layout's key when it differs."""
    return list(dict.fromkeys(claim_index_key(counts, workflow_id) for counts in layout.layouts))
