"""Store-wide records: idempotency keys, meta records, schedules, concurrency slots,
finalizer teardowns and dead letters, the events outbox, bulk operations."""

from __future__ import annotations

from weft_serverless.storage.base import Key
from weft_serverless.storage.keys.encoding import counter, enc, ms, shard_of
from weft_serverless.storage.keys.runs import step_slot, workflow_partition
from weft_serverless.storage.keys.shards import ShardCounts

META_PARTITION = "meta"
OWNERSHIP_MODE = "ownership-mode"
LEASE_EPOCH = "lease#epoch"
LEASE_HOLDER = "lease#holder"
CLOCK_PROBE = "clock-probe"  # never written: a store with a clock reads it to hear the time


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


# -- the events outbox (ADR 0032) ------------------------------------------------------------


def outbox_partition(shard: int) -> str:
    return f"outbox#{shard:02d}"


def outbox_key(shards: ShardCounts, at: float, workflow_id: str, event_id: str) -> Key:
    """An event waiting to be published, in the shard of its run, oldest first.

    Written only when an event sink is configured, in the batch of the change it reports;
    the publisher deletes it once the sink accepted it."""
    shard = shard_of(workflow_id, shards.outbox)
    return Key(outbox_partition(shard), f"{ms(at):016d}#{enc(workflow_id)}#{enc(event_id)}")


EVENT_DEAD_LETTER_PARTITION = "outbox-dead"


def event_dead_letter_key(workflow_id: str, at: float, event_id: str) -> Key:
    """An event the sink kept refusing, moved out of the outbox; one partition, so listing
    them is one range read (by run: a prefix), and outside the run's so a purge keeps it."""
    return Key(EVENT_DEAD_LETTER_PARTITION, f"{enc(workflow_id)}#{ms(at):016d}#{enc(event_id)}")


# -- bulk operations (ADR 0031) --------------------------------------------------------------

BULK_PARTITION = "bulk"
"""One record per bulk operation (its filter, cursor, counts and audit fields), sorted by id
(ids start with the creation time), in one partition: listing them is one range read, and
they live apart from the runs they acted on, so a purge of those runs keeps them."""


def bulk_key(operation_id: str) -> Key:
    return Key(BULK_PARTITION, enc(operation_id))


BULK_RUN_PREFIX = "bulkrun#"


def bulk_run_key(operation_id: str, workflow_id: str) -> Key:
    """Marks a run an operation retried, written in the retry's batch: a resumed operation
    that meets the run failed again does not retry it twice. It lives in the run's
    partition, so purging the run deletes it (a run's replay reads no such record)."""
    return Key(workflow_partition(workflow_id), BULK_RUN_PREFIX + enc(operation_id))


def legacy_bulk_run_key(operation_id: str, workflow_id: str) -> Key:
    """Where operations stored before markers moved into the run's partition keep marking
    the runs they retry (one partition per operation, never purged)."""
    return Key(BULK_RUN_PREFIX + enc(operation_id), enc(workflow_id))
