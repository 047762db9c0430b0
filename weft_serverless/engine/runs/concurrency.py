"""Concurrency limits: taking a slot at a start, freeing it in the terminal batch (ADR 0025).

A workflow type declared with ``Concurrency(max, key, on_limit)`` keeps, per key, up to
``max`` slot records ``conc#{type}#{key}/slot#NNNN``; a run holds one from its start to its
terminal status. Taking one is a condition ``slot absent`` plus its put in the start batch,
so two starts racing for the same slot cannot both land (the loser re-reads and takes
another, or finds the key full). Freeing it is a delete in the same batch as the terminal
move (``transitions.move``), so no crash can leak or double a slot. The run's state records
what it holds (``extra["concurrency"]``), which is how the terminal move knows what to free.

With ``on_limit="queue"`` a start that finds the key full stores the run ``pending`` with a
queue entry instead, and arms an admit timer for the key in the same batch; every free of a
queue-mode slot arms one too. An admit timer's firing (``admission``) moves the oldest queued
runs into free slots. Every queued run therefore has a durable wake-up: the one its own start
armed, which fires after its queue entry landed and either admits it or finds every slot
held, and each holder's terminal batch then arms another.

Workflow types without a declared limit write and read nothing here: the per-start cost of
every other workflow is unchanged.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.concurrency import MAX_KEY_BYTES, Concurrency
from weft_serverless.engine.ownership import Fragment
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.persistence.records import PENDING, RUNNING, WorkflowState
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import ConcurrencyKeyError, WorkflowConcurrencyLimitExceededError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts

FIELD = "concurrency"
"""``state.extra`` field: ``{"key", "queue"}`` plus ``"slot"`` (held) or ``"queued"``."""
GATE_PREFIX = "conc#"


def spec_of(rt: Runtime, workflow_type: str) -> Concurrency | None:
    definition = rt.definitions.get(workflow_type)
    return None if definition is None else definition.concurrency


def declare(rt: Runtime, state: WorkflowState) -> None:
    """Record the run's concurrency key in its state (nothing for a type without a limit).

    The key function sees the input as the workflow will (decoded); one that raises or
    returns a non-string is a ``ConcurrencyKeyError`` now, before anything is written.
    """
    spec = spec_of(rt, state.type)
    if spec is None:
        return
    try:
        key = spec.key(decode(state.input))
    except Exception as exc:
        raise ConcurrencyKeyError(
            f"the concurrency key function of workflow {state.type!r} raised "
            f"{type(exc).__name__}: {exc}; make it return a string for every input",
            "input",
        ) from exc
    if not isinstance(key, str):
        raise ConcurrencyKeyError(
            f"the concurrency key function of workflow {state.type!r} returned "
            f"{type(key).__name__} {key!r}; it must return a string",
            "input",
        )
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        size = MAX_KEY_BYTES + 1
    if size > MAX_KEY_BYTES:
        raise ConcurrencyKeyError(
            f"the concurrency key function of workflow {state.type!r} returned a key of "
            f"{size} UTF-8 bytes (or one UTF-8 cannot encode); keys are at most "
            f"{MAX_KEY_BYTES} bytes: return a shorter one (a hash of a long value)",
            "input",
        )
    state.extra[FIELD] = {"key": key, "queue": spec.on_limit == "queue"}


def held_slots(rt: Runtime, workflow_type: str, key: str) -> dict[int, str]:
    """Slot number -> id of the run holding it, read in one range read."""
    partition = keys.concurrency_partition(workflow_type, key)
    return {
        keys.counter_value(sort[len(keys.SLOT_PREFIX) :]): decode(value)["id"]
        for sort, value in rt.storage.scan(partition, keys.SLOT_PREFIX)
    }


def queued(rt: Runtime, workflow_type: str, key: str, limit: int | None = None) -> Iterator[str]:
    """Ids of the runs waiting for a slot of ``key``, oldest first."""
    partition = keys.concurrency_partition(workflow_type, key)
    for _, value in rt.storage.scan(partition, keys.QUEUE_PREFIX, limit=limit):
        yield decode(value)["id"]


def free_slot(spec: Concurrency, held: dict[int, str]) -> int | None:
    """A free slot number, picked at random so racing starts rarely pick the same one."""
    if len(held) >= spec.max:
        return None
    return random.choice([n for n in range(spec.max) if n not in held])


def slot_fragment(state: WorkflowState, slot: int) -> Fragment:
    record = state.extra[FIELD]
    slot_key = keys.concurrency_slot_key(state.type, record["key"], slot)
    return Fragment(
        conditions=[Condition(slot_key, None)],
        ops=[Put(slot_key, encode({"id": state.id}))],
    )


def acquire(rt: Runtime, state: WorkflowState) -> Fragment:
    """Take a slot for a run about to be created (setting ``state`` to match); the returned
    fragment joins its start batch. Nothing for a type without a limit.

    Raises ``WorkflowConcurrencyLimitExceededError`` when the key is full under ``reject``;
    under ``queue`` the run becomes ``pending`` and queued, behind any run queued already.
    """
    record: dict[str, Any] | None = state.extra.get(FIELD)
    spec = spec_of(rt, state.type)
    if record is None or spec is None:
        return Fragment()
    key = record["key"]
    record.pop("slot", None)
    record.pop("queued", None)
    state.status = PENDING if state.extra.get("start_at") is not None else RUNNING
    held = held_slots(rt, state.type, key)
    slot = free_slot(spec, held)
    waiting = spec.on_limit == "queue" and next(queued(rt, state.type, key, 1), None) is not None
    if slot is not None and not waiting:
        record["slot"] = slot
        return slot_fragment(state, slot)
    if spec.on_limit == "reject":
        raise WorkflowConcurrencyLimitExceededError(state.type, key, spec.max)
    record["queued"] = True
    state.status = PENDING
    queue_key = keys.concurrency_queue_key(state.type, key, state.created_at, state.id)
    return Fragment(
        conditions=[Condition(queue_key, None)],
        ops=[
            Put(queue_key, encode({"id": state.id})),
            arm_admit(rt.shards, state.type, key, rt.now()),
        ],
    )


def retake(rt: Runtime, workflow_type: str, record: dict[str, Any]) -> dict[str, Any]:
    """The record of a run becoming active again (a retry of a failed run): a free slot of
    its key, or ``WorkflowConcurrencyLimitExceededError`` when the key is full."""
    fresh = {"key": record["key"], "queue": record.get("queue", False)}
    spec = spec_of(rt, workflow_type)
    if spec is None:
        return fresh
    slot = free_slot(spec, held_slots(rt, workflow_type, fresh["key"]))
    if slot is None:
        raise WorkflowConcurrencyLimitExceededError(workflow_type, fresh["key"], spec.max)
    return {**fresh, "slot": slot}


def release(shards: ShardCounts, state: WorkflowState, now: float) -> list[Op]:
    """The writes a terminal move of ``state`` adds: free its slot (waking the queue of its
    key) or drop its queue entry. Nothing for a run that holds neither."""
    record: dict[str, Any] | None = state.extra.get(FIELD)
    if not record:
        return []
    key = record["key"]
    if "slot" in record:
        ops: list[Op] = [Delete(keys.concurrency_slot_key(state.type, key, record["slot"]))]
        if record.get("queue"):
            ops.append(arm_admit(shards, state.type, key, now))
        return ops
    if record.get("queued"):
        return [Delete(keys.concurrency_queue_key(state.type, key, state.created_at, state.id))]
    return []


def freed_gate(state: WorkflowState) -> str | None:
    """The gate a terminal move of ``state`` woke: it held a slot of a queueing key."""
    record: dict[str, Any] | None = state.extra.get(FIELD)
    if not record or "slot" not in record or not record.get("queue"):
        return None
    return gate_id(state.type, str(record["key"]))


def is_queued(state: WorkflowState) -> bool:
    return bool(state.extra.get(FIELD, {}).get("queued"))


def key_of(state: WorkflowState) -> str | None:
    """The concurrency key a run was started with (None: its type had no limit then)."""
    record = state.extra.get(FIELD)
    return None if not record else str(record["key"])


def gate_id(workflow_type: str, key: str) -> str:
    """What an admit timer names instead of a workflow: the type and key whose queue to
    serve. The type's length comes first, so neither part is escaped here: the timer key
    encodes the gate once, which keeps the longest one within a sort key (ADR 0025)."""
    return f"{GATE_PREFIX}{len(workflow_type)}#{workflow_type}{key}"


def parse_gate(gate: str) -> tuple[str, str]:
    length, rest = gate[len(GATE_PREFIX) :].split("#", 1)
    return rest[: int(length)], rest[int(length) :]


def arm_admit(shards: ShardCounts, workflow_type: str, key: str, now: float) -> Put:
    """An admit timer for the key, due now, under a key of its own: a pass deletes the timer
    it fired once done, so one armed meanwhile (a slot freed while that pass read the slots
    full) must not share its key, or its wake-up would be deleted unfired."""
    gate = gate_id(workflow_type, key)
    return timers.arm(shards, timers.CONCURRENCY_ADMIT, gate, now, uuid.uuid4().hex[:16])
