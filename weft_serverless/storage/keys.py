"""The one place that spells storage keys, and every shard count.

Layout (DESIGN.md section 4):

* ``wf#{id}`` holds everything of one workflow (state, op log, pending facts, attempts,
  buffered signals, child results, owner epoch and holder), so resuming is one range read.
* ``timers#{shard}``, ``status#{status}#{shard}`` are hash-sharded global indexes written in the
  same atomic batch as the change they index; they are read shard by shard.
* ``sa#{name}#{shard}`` and ``tag#{shard}`` index runs by search attribute value and tag
  (``{value}#{created}#{id}``), written in the batch that changes them (ADR 0030).
* ``idem#{key}`` maps an idempotency key to a workflow id; ``meta`` holds store-wide records.
* ``schedules`` holds one record per schedule, sorted by id.

Untrusted parts (ids, names) are percent-encoded, so they are ASCII and can never contain the
``#`` separator. Times are epoch milliseconds zero-padded to 16 digits so they sort as text.
Counters (steps, branches, attempts, update sequences) go through ``counter``, whose text
order is number order for every value.
"""

from __future__ import annotations

import math
import zlib
from urllib.parse import quote, unquote

from weft_serverless.storage.base import Key

TIMER_SHARDS = 4
STATUS_SHARDS = 4
CLAIM_SHARDS = 4

STATE = "state"
RESULT = "result"
OP_PREFIX = "op#"
PENDING_PREFIX = "pend#"
ATTEMPT_PREFIX = "att#"
SIGNAL_PREFIX = "sig#"
SIGNAL_ID_PREFIX = "sigid#"
CHILD_PREFIX = "child#"
UPDATE_APPLIED_PREFIX = "upa#"
UPDATE_RESPONSE_PREFIX = "upr#"
VERSION_PREFIX = "ver#"
ASYNC_RESULT_PREFIX = "asyncres#"
ACTIVITY_STARTED_PREFIX = "actrec#"
HEARTBEAT_PREFIX = "hb#"
OWNER_EPOCH = "owner#epoch"
OWNER_HOLDER = "owner#holder"
WAKE = "wake"

META_PARTITION = "meta"
OWNERSHIP_MODE = "ownership-mode"
LEASE_EPOCH = "lease#epoch"
LEASE_HOLDER = "lease#holder"
CLOCK_PROBE = "clock-probe"  # never written: a store with a clock reads it to hear the time


def enc(part: str) -> str:
    """Percent-encode an untrusted key component (ASCII out, no ``#``)."""
    return quote(part, safe="-_.~@:")


def dec(part: str) -> str:
    return unquote(part)


COUNTER_OVERFLOW = "~"
"""Marks a counter too large for its zero-padded width; sorts after every digit."""


def counter(value: int, width: int) -> str:
    """Text whose order is the order of non-negative integers, for a counter in a key.

    Values below ``10**width`` are the zero-padded digits, byte-identical to the keys stored
    before this encoding existed. Larger ones are ``~``, the digit count in two digits, then
    the digits: ``~`` sorts after every digit and a longer number has a larger count, so
    order holds across widths, and no encoding is a prefix of another (so a suffix such as a
    branch ``.001`` after it cannot reorder keys).
    """
    if value < 0:
        raise ValueError(f"a key counter must not be negative, got {value}")
    digits = str(value)
    if len(digits) <= width:
        return digits.zfill(width)
    if len(digits) > 99:
        raise ValueError(f"a key counter has at most 99 digits, got {len(digits)}")
    return f"{COUNTER_OVERFLOW}{len(digits):02d}{digits}"


def counter_value(text: str) -> int:
    """The integer ``counter`` encoded as ``text``."""
    if text.startswith(COUNTER_OVERFLOW):
        return int(text[3:])
    return int(text)


def shard_of(workflow_id: str, shards: int) -> int:
    return zlib.crc32(workflow_id.encode()) % shards


def ms(seconds: float) -> int:
    return round(seconds * 1000)


# -- workflow partition ----------------------------------------------------------------------


def workflow_partition(workflow_id: str) -> str:
    return "wf#" + enc(workflow_id)


def state_key(workflow_id: str) -> Key:
    return Key(workflow_partition(workflow_id), STATE)


def result_key(workflow_id: str) -> Key:
    """A finished run's result, when it does not fit in the state record beside its input."""
    return Key(workflow_partition(workflow_id), RESULT)


def step_slot(step: int) -> str:
    return counter(step, 8)


def branch_slot(parent: str, index: int) -> str:
    return f"{parent}.{counter(index, 3)}"


def describe_slot(slot: str) -> str:
    """A slot for people: ``00000003.001`` -> ``4 (branch 2)`` (both counted from 1)."""
    top, *branches = slot.split(".")
    text = str(counter_value(top) + 1)
    for branch in branches:
        text += f" (branch {counter_value(branch) + 1})"
    return text


def op_key(workflow_id: str, slot: str) -> Key:
    return Key(workflow_partition(workflow_id), OP_PREFIX + slot)


def pending_key(workflow_id: str, slot: str) -> Key:
    return Key(workflow_partition(workflow_id), PENDING_PREFIX + slot)


def attempt_ref(slot: str, attempt: int) -> str:
    """``{slot}#{attempt}``: names one attempt of a step inside the sort keys below."""
    return f"{slot}#{counter(attempt, 4)}"


def attempt_key(workflow_id: str, slot: str, attempt: int) -> Key:
    return Key(workflow_partition(workflow_id), ATTEMPT_PREFIX + attempt_ref(slot, attempt))


def signal_prefix(name: str) -> str:
    return f"{SIGNAL_PREFIX}{enc(name)}#"


def signal_key(workflow_id: str, name: str, seq: str) -> Key:
    return Key(workflow_partition(workflow_id), signal_prefix(name) + seq)


def signal_id_key(workflow_id: str, signal_id: str) -> Key:
    return Key(workflow_partition(workflow_id), SIGNAL_ID_PREFIX + enc(signal_id))


def child_result_key(workflow_id: str, slot: str) -> Key:
    return Key(workflow_partition(workflow_id), CHILD_PREFIX + slot)


def update_applied_key(workflow_id: str, slot: str, seq: int) -> Key:
    """An update applied while the workflow was parked at top-level step ``slot``."""
    return Key(workflow_partition(workflow_id), f"{UPDATE_APPLIED_PREFIX}{slot}#{counter(seq, 4)}")


def update_response_key(workflow_id: str, update_id: str) -> Key:
    return Key(workflow_partition(workflow_id), UPDATE_RESPONSE_PREFIX + enc(update_id))


def version_key(workflow_id: str, change_id: str) -> Key:
    return Key(workflow_partition(workflow_id), VERSION_PREFIX + enc(change_id))


def async_result_key(workflow_id: str, slot: str, attempt: int) -> Key:
    return Key(workflow_partition(workflow_id), ASYNC_RESULT_PREFIX + attempt_ref(slot, attempt))


def activity_started_key(workflow_id: str, slot: str, attempt: int) -> Key:
    return Key(
        workflow_partition(workflow_id), ACTIVITY_STARTED_PREFIX + attempt_ref(slot, attempt)
    )


def heartbeat_key(workflow_id: str, slot: str) -> Key:
    """The latest heartbeat of the step at ``slot`` (one record a step, overwritten)."""
    return Key(workflow_partition(workflow_id), HEARTBEAT_PREFIX + slot)


def owner_epoch_key(workflow_id: str) -> Key:
    return Key(workflow_partition(workflow_id), OWNER_EPOCH)


def owner_holder_key(workflow_id: str) -> Key:
    return Key(workflow_partition(workflow_id), OWNER_HOLDER)


def wake_key(workflow_id: str) -> Key:
    """Points at the wake-up timer of a run that may be driven but has not parked yet."""
    return Key(workflow_partition(workflow_id), WAKE)


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


def timer_key(due: float, workflow_id: str, tag: str) -> Key:
    """A due timer; ``tag`` tells timers of one workflow apart (e.g. ``s00000003``)."""
    shard = shard_of(workflow_id, TIMER_SHARDS)
    return Key(timer_partition(shard), f"{due_ms(due):016d}#{enc(workflow_id)}#{tag}")


def timer_due_bound(now: float) -> str:
    """Sort keys strictly below this bound are due at ``now`` (see ``is_due``)."""
    return f"{passed_ms(now) + 1:016d}"


def timer_due_of(sort: str) -> float:
    return int(sort.split("#", 1)[0]) / 1000.0


def timer_moved(key: Key, due: float) -> Key:
    """The same timer (shard, workflow, tag) due at ``due`` instead."""
    return Key(key.partition, f"{math.ceil(due * 1000):016d}#{key.sort.split('#', 1)[1]}")


# -- status index ----------------------------------------------------------------------------


def status_partition(status: str, shard: int) -> str:
    return f"status#{status}#{shard:02d}"


def status_key(status: str, workflow_id: str, created_at: float) -> Key:
    shard = shard_of(workflow_id, STATUS_SHARDS)
    return Key(status_partition(status, shard), f"{ms(created_at):016d}#{enc(workflow_id)}")


def status_entry_id(sort: str) -> str:
    return dec(sort.split("#", 1)[1])


# -- visibility index (ADR 0030) -------------------------------------------------------------

VISIBILITY_SHARDS = 4


def attribute_partition(name: str, shard: int) -> str:
    """Index items of search attribute ``name``; the sort starts with the value's token."""
    return f"sa#{enc(name)}#{shard:02d}"


def tag_partition(shard: int) -> str:
    """Index items of tags; the sort starts with the tag."""
    return f"tag#{shard:02d}"


def run_suffix(workflow_id: str, created_at: float) -> str:
    """``created#id``: the tail of every index sort key, and the list cursor's shape."""
    return f"{ms(created_at):016d}#{enc(workflow_id)}"


def attribute_key(name: str, token: str, workflow_id: str, created_at: float) -> Key:
    shard = shard_of(workflow_id, VISIBILITY_SHARDS)
    return Key(attribute_partition(name, shard), f"{token}#{run_suffix(workflow_id, created_at)}")


def tag_key(tag: str, workflow_id: str, created_at: float) -> Key:
    shard = shard_of(workflow_id, VISIBILITY_SHARDS)
    return Key(tag_partition(shard), f"{enc(tag)}#{run_suffix(workflow_id, created_at)}")


# -- held workflow claims (workflow-lease) ---------------------------------------------------


def claim_partition(shard: int) -> str:
    return f"claims#{shard:02d}"


def claim_index_key(workflow_id: str) -> Key:
    """Lists claims held anywhere, so a maintenance pass can find expired ones to take over."""
    return Key(claim_partition(shard_of(workflow_id, CLAIM_SHARDS)), enc(workflow_id))


# -- store-wide ------------------------------------------------------------------------------


def idempotency_key(key: str) -> Key:
    return Key("idem#" + enc(key), "start")


def meta_key(name: str) -> Key:
    return Key(META_PARTITION, name)


SCHEDULE_PARTITION = "schedules"
"""One record per schedule (its definition and state), in one partition so that listing
schedules is one range read; a maintenance pass never reads it (a schedule's next fire is a
timer), so idle schedules cost nothing."""


def schedule_key(schedule_id: str) -> Key:
    return Key(SCHEDULE_PARTITION, enc(schedule_id))


# -- concurrency limits (ADR 0025) -----------------------------------------------------------

SLOT_PREFIX = "slot#"
QUEUE_PREFIX = "queue#"


def concurrency_partition(workflow_type: str, key: str) -> str:
    """One partition per workflow type and concurrency key: its slots and its queue."""
    return f"conc#{enc(workflow_type)}#{enc(key)}"


def concurrency_slot_key(workflow_type: str, key: str, slot: int) -> Key:
    """Slot ``slot`` of a key; present while a run holds it (its value names the run)."""
    return Key(concurrency_partition(workflow_type, key), SLOT_PREFIX + counter(slot, 4))


def concurrency_queue_key(workflow_type: str, key: str, created_at: float, wf_id: str) -> Key:
    """A run waiting for a slot of its key, in start order."""
    return Key(
        concurrency_partition(workflow_type, key),
        f"{QUEUE_PREFIX}{ms(created_at):016d}#{enc(wf_id)}",
    )


# -- finalizers and their teardown (ADR 0027) ------------------------------------------------

FINALIZER_PREFIX = "fin#"
TEARDOWN = "teardown"
DEAD_LETTER_PARTITION = "deadletters"


def finalizer_key(workflow_id: str, first_step: int, position: int) -> Key:
    """The ``position``-th finalizer a run registered (``ctx.on_cancel``).

    The slot is the run's first step, so records of runs before a ``continue_as_new`` are
    told apart (and set aside) like every slotted record; positions sort in registration order.
    """
    return Key(
        workflow_partition(workflow_id),
        f"{FINALIZER_PREFIX}{step_slot(first_step)}#{counter(position, 4)}",
    )


def teardown_key(workflow_id: str) -> Key:
    """A terminal run's teardown: which finalizers are left, and who runs them."""
    return Key(workflow_partition(workflow_id), TEARDOWN)


def dead_letter_key(workflow_id: str, created_at: float, first_step: int, position: int) -> Key:
    """A finalizer that exhausted its retries, outside the run's partition so that purging
    the run keeps it; one partition, so listing dead letters is one range read."""
    return Key(
        DEAD_LETTER_PARTITION,
        f"{enc(workflow_id)}#{ms(created_at):016d}#{step_slot(first_step)}#{counter(position, 4)}",
    )
