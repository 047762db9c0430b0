"""Finalizers: storing a run's registrations, and arming its teardown in its terminal batch.

``ctx.on_cancel`` only remembers a registration on the context; the drive stores new ones
(``store_registered``) before it commits anything else the workflow did after them, in one
batch fenced like every write of the run and conditioned on the state it read, so a
registration never lands on a run that has ended. Replay recognises a stored registration
by its position and writes nothing.

A terminal batch that ends a run cancelled or timed out (or failed, for the finalizers
registered with ``on_failure``) also writes the run's teardown record, listing those
finalizers in reverse registration order, and a ``teardown`` timer due now
(``arm_teardown``). A move made from outside reads the registrations first and conditions
its batch on the absence of the next one, so a registration landing between that read and
the batch makes the batch fail and the move retry with it (ADR 0027).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weft_serverless.codec import decode, decode_record, encode
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.persistence.records import (
    CANCELLED,
    FAILED,
    TIMED_OUT,
    History,
    WorkflowState,
)
from weft_serverless.engine.runs.commit import commit, room
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import NondeterminismError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts

ENDS = frozenset({CANCELLED, TIMED_OUT, FAILED})
"""Statuses a teardown can follow (failed only for ``on_failure`` finalizers)."""

PENDING, RUNNING, COMPLETED = "pending", "running", "completed"
DONE, DEAD = "done", "dead-lettered"

Registered = Sequence[tuple[int, dict[str, Any]]]
"""A run's stored registrations as (position, record), in registration order."""


def position_of(ref: str) -> int:
    """The position in a ``{slot}#{position}`` reference (``History.finalizers`` keys)."""
    return keys.counter_value(ref.rsplit("#", 1)[1])


def store_registered(rt: Runtime, history: History, ctx: WorkflowContext) -> None:
    """Store the registrations ``ctx`` made since the last call (one fenced batch).

    A registration already stored at its position (a replay) is checked, not written: a
    different activity there is a ``NondeterminismError``. Raises ``LostCommit`` when the
    run's state changed since the drive read it (it ended meanwhile).
    """
    workflow_id, first = history.state.id, history.state.first_step
    slot = keys.step_slot(first)
    conditions: list[Condition] = []
    ops: list[Op] = []
    added: dict[str, dict[str, Any]] = {}
    for position in range(ctx.finalizers_stored, len(ctx.finalizers)):
        registration = ctx.finalizers[position]
        ref = f"{slot}#{keys.counter(position, 4)}"
        stored = history.finalizers.get(ref)
        if stored is not None:
            if stored["act"] != registration.activity:
                raise NondeterminismError(
                    f"finalizer {position + 1}",
                    f"on_cancel:{stored['act']}",
                    f"on_cancel:{registration.activity}",
                )
            continue
        key = keys.finalizer_key(workflow_id, first, position)
        record = {**registration.to_record(), "at": rt.now()}
        conditions.append(Condition(key, None))
        ops.append(Put(key, encode(record)))
        added[ref] = record
    if not ops:
        ctx.finalizers_stored = len(ctx.finalizers)
        return
    state = Condition(keys.state_key(workflow_id), history.state_bytes)
    size = room(rt, workflow_id, beside=1)  # a registration's condition and put share a key
    for start in range(0, len(ops), size):  # in order: a crash leaves a prefix stored
        chunk = slice(start, start + size)
        commit(rt, workflow_id, [state, *conditions[chunk]], ops[chunk])
    history.finalizers.update(added)
    ctx.finalizers_stored = len(ctx.finalizers)
    rt.metrics.incr("finalizers_registered", len(ops))


def of_history(history: History) -> Registered:
    """The registrations a drive holds (its own run's only: earlier runs' are set aside)."""
    return sorted((position_of(ref), record) for ref, record in history.finalizers.items())


def read_registered(rt: Runtime, state: WorkflowState) -> tuple[Registered, Condition]:
    """A run's registrations read from storage (one prefix read), and the condition that no
    registration follows them: a move from outside conditions its batch on it."""
    partition = keys.workflow_partition(state.id)
    prefix = f"{keys.FINALIZER_PREFIX}{keys.step_slot(state.first_step)}#"
    found = [
        (
            keys.counter_value(sort[len(prefix) :]),
            decode_record(value, f"record {sort!r} of {partition!r}"),
        )
        for sort, value in rt.storage.scan(partition, prefix)
    ]
    following = keys.finalizer_key(state.id, state.first_step, len(found))
    return found, Condition(following, None)


def arm_teardown(
    shards: ShardCounts, state: WorkflowState, status: str, registered: Registered, now: float
) -> list[Op]:
    """The teardown record and its timer, for a terminal batch ending ``state`` in ``status``;
    nothing when no finalizer applies (completed; failed without ``on_failure``)."""
    if status not in ENDS:
        return []
    chosen = [
        (position, record)
        for position, record in registered
        if status != FAILED or record.get("onf")
    ]
    if not chosen:
        return []
    timer = timers.arm(shards, timers.TEARDOWN, state.id, now)
    record = {
        "status": PENDING,
        "reason": status,
        "type": state.type,
        "first": state.first_step,
        "created": state.created_at,
        "items": [_item(position, record) for position, record in reversed(chosen)],
        "due": now,
        "timer": timers.timer_ref(timer.key),
        "holder": None,
        "until": 0.0,
        "epoch": 0,
        "at": now,
    }
    return [Put(keys.teardown_key(state.id), encode(record)), timer]


def armed(ops: Sequence[Op], workflow_id: str) -> bool:
    """Whether a terminal batch's ``ops`` arm a teardown of ``workflow_id``."""
    key = keys.teardown_key(workflow_id)
    return any(isinstance(op, Put) and op.key == key for op in ops)


def _item(position: int, record: dict[str, Any]) -> dict[str, Any]:
    return {"n": position, "act": record["act"], "attempts": 0, "state": PENDING, "error": None}


def pending_teardown(rt: Runtime, workflow_id: str) -> bool:
    """Whether the run has a teardown not finished yet (purge and retry wait for it)."""
    data = rt.storage.get(keys.teardown_key(workflow_id))
    return data is not None and decode_record(data, "a teardown record")["status"] != COMPLETED


def read_view(rt: Runtime, workflow_id: str) -> dict[str, Any] | None:
    """The run's teardown for people (``describe``, ``weft show``); None without one."""
    data = rt.storage.get(keys.teardown_key(workflow_id))
    if data is None:
        return None
    record = decode_record(data, f"the teardown of workflow {workflow_id!r}")
    return {
        "status": record["status"],
        "reason": record["reason"],
        "holder": record.get("holder"),
        "next_attempt_at": record.get("due") if record["status"] != COMPLETED else None,
        "finalizers": [
            {
                "activity": item["act"],
                "position": item["n"] + 1,
                "state": item["state"],
                "attempts": item["attempts"],
                "last_error": item.get("error"),
            }
            for item in record["items"]
        ],
    }


def dead_letters(rt: Runtime, workflow_id: str | None = None) -> list[dict[str, Any]]:
    """Dead-lettered finalizers (of one workflow id, or all), oldest run first; each with
    ``workflow_id``, ``workflow_type``, ``reason``, ``activity``, ``position``,
    ``attempts``, ``error``, ``input`` (decoded) and ``at``."""
    prefix = "" if workflow_id is None else keys.enc(workflow_id) + "#"
    out = []
    for sort, value in rt.storage.scan(keys.DEAD_LETTER_PARTITION, prefix):
        letter = dict(decode_record(value, f"dead letter {sort!r}"))
        letter["input"] = decode(letter["input"])
        out.append(letter)
    return out
