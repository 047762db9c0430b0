"""The wake-up timer a run keeps from the moment it may be driven until it parks or finishes.

Liveness (DESIGN.md, Invariants): a drive can fail at any point (a transient storage error,
a crash, a lost invocation end), so the batch that makes a run drivable without an event
timer (start, child start, resume, retry, delayed activation, an update that releases a
condition the run waits on) also writes a ``wake`` timer due ``WAKE_GRACE`` later and a
pointer to it in the run's partition. The batch that parks or finishes the run deletes both,
so a run that parks or ends inline leaves nothing; one whose drive failed is driven by the
first maintenance pass after the grace.
See docs/decisions/0009-wake-up-until-parked.md.
"""

from __future__ import annotations

from weft_serverless.codec import decode_record, encode
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.persistence.records import History
from weft_serverless.engine.persistence.timers import timer_ref
from weft_serverless.storage import keys
from weft_serverless.storage.base import Delete, Key, Op, Put, Storage
from weft_serverless.storage.keys.shards import ShardCounts

# Long enough that an inline drive in progress (an activity, a Lambda invocation) is not
# raced by maintenance in the common case; short enough that a stranded run moves on soon.
WAKE_GRACE = 60.0


def wake_timer(shards: ShardCounts, workflow_id: str, now: float) -> Key:
    return timers.timer_key(shards, timers.WAKE, workflow_id, now + WAKE_GRACE)


def arm(shards: ShardCounts, workflow_id: str, now: float) -> list[Op]:
    """The writes that give a run a wake-up due ``WAKE_GRACE`` after ``now``."""
    timer = wake_timer(shards, workflow_id, now)
    return [
        Put(keys.wake_key(workflow_id), encode({"timer": timer_ref(timer)})),
        Put(timer, timers.timer_value(workflow_id, timers.WAKE)),
    ]


def adopt(history: History, timer: list[str]) -> list[Op]:
    """Writes for a step consuming an event (a signal) whose timer is still stored.

    The event made the run drivable; its timer stays as the run's wake-up (the pointer is
    written instead of deleting the timer) unless the run already has one.
    """
    if history.wake is None:
        return [Put(keys.wake_key(history.state.id), encode({"timer": timer}))]
    return [Delete(Key(*timer))]


def adopted(history: History, timer: list[str]) -> None:
    if history.wake is None:
        history.wake = timer


def disarm(history: History) -> list[Op]:
    """Deletes of the run's wake-up (none when it has none): it parked or finished."""
    if history.wake is None:
        return []
    return [Delete(keys.wake_key(history.state.id)), Delete(Key(*history.wake))]


def disarm_stored(storage: Storage, workflow_id: str) -> list[Op]:
    """Deletes of the run's wake-up as stored (one point read): a move made from outside
    reads no history, and a run it ends keeps no wake-up either."""
    raw = storage.get(keys.wake_key(workflow_id))
    if raw is None:
        return []
    timer = decode_record(raw, f"the wake-up of workflow {workflow_id!r}")["timer"]
    return [Delete(keys.wake_key(workflow_id)), Delete(Key(*timer))]


def disarmed(history: History) -> None:
    """Record that the batch carrying ``disarm(history)`` committed."""
    history.wake = None
