"""Admitting queued runs into freed concurrency slots: what an admit timer does (ADR 0025).

Fired for one (workflow type, key) gate: while the key has a free slot and a queued run,
the oldest queued run takes the slot in one conditional batch (slot absent, run's state
unchanged) that also drops its queue entry, moves it to running (or keeps it pending when
its delayed start is still ahead) and gives it a wake-up due now. A refused batch means
another engine admitted or started meanwhile: the loop re-reads. A crash part-way leaves
the timer stored (it is deleted only after this returns), so the next pass carries on.
"""

from __future__ import annotations

from weft_serverless.codec import encode
from weft_serverless.engine.ownership import Fragment
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.persistence.records import PENDING, RUNNING, WorkflowState
from weft_serverless.engine.runs import transitions
from weft_serverless.engine.runs.commit import write, write_claiming
from weft_serverless.engine.runs.concurrency import (
    FIELD,
    free_slot,
    held_slots,
    is_queued,
    parse_gate,
    queued,
    slot_fragment,
    spec_of,
)
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import UnknownWorkflowTypeError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts

_ROUNDS = 1000


def admit(rt: Runtime, gate: str) -> int:
    """Fill the free slots of ``gate``'s key from its queue, oldest first; how many ran."""
    return len(admit_runs(rt, gate))


def admit_runs(rt: Runtime, gate: str) -> list[tuple[str, str]]:
    """Fill the free slots of ``gate``'s key from its queue, oldest first; each run admitted
    with the status it now has (a delayed one stays pending until its start time)."""
    workflow_type, key = parse_gate(gate)
    if workflow_type not in rt.definitions:
        raise UnknownWorkflowTypeError(
            f"queued runs of workflow type {workflow_type!r} wait for an engine that registers it"
        )
    spec = spec_of(rt, workflow_type)
    admitted: list[tuple[str, str]] = []
    for _ in range(_ROUNDS):
        slot = -1  # the type no longer declares a limit: admit without a slot
        if spec is not None:
            free = free_slot(spec, held_slots(rt, workflow_type, key))
            if free is None:
                return admitted
            slot = free
        candidate = _next_candidate(rt, workflow_type, key)
        if candidate is None:
            return admitted
        status = _admit_one(rt, candidate[0], candidate[1], slot)
        if status is not None:
            admitted.append((candidate[0], status))
    return admitted


def _next_candidate(rt: Runtime, workflow_type: str, key: str) -> tuple[str, bytes] | None:
    """The oldest queued run that can take a slot now (a suspended one waits its resume)."""
    for run_id in queued(rt, workflow_type, key):
        current = rt.storage.get(keys.state_key(run_id))
        if current is None:
            continue
        state = WorkflowState.from_bytes(current)
        if state.status == PENDING and is_queued(state):
            return run_id, current
    return None


def _admit_one(rt: Runtime, run_id: str, current: bytes, slot: int) -> str | None:
    """Admit one queued run; the status it now has (None: another engine was first)."""
    state = WorkflowState.from_bytes(current)
    now = rt.now()
    record = {k: v for k, v in state.extra[FIELD].items() if k != "queued"}
    if slot >= 0:
        record["slot"] = slot
    start_at = state.extra.get("start_at")
    target = PENDING if start_at is not None and start_at > now else RUNNING
    new, ops = transitions.move(rt, state, target, extra={**state.extra, FIELD: record})
    key = record["key"]
    ops.append(Delete(keys.concurrency_queue_key(state.type, key, state.created_at, run_id)))
    taken = slot_fragment(new, slot) if slot >= 0 else Fragment()
    fence = rt.fence.resume_fragment(run_id) if target == RUNNING else Fragment()
    if target == RUNNING:
        ops += _wake_now(rt.shards, run_id, now)
    conditions = [Condition(keys.state_key(run_id), current), *taken.conditions]
    conditions += fence.conditions
    ops += taken.ops + fence.ops
    landed = (
        write_claiming(rt, run_id, conditions, ops)
        if target == RUNNING
        else write(rt, conditions, ops)  # the store-wide fence: a pending run has no claim
    )
    return target if landed else None


def _wake_now(shards: ShardCounts, run_id: str, now: float) -> list[Op]:
    """A wake-up due at once (``wakeups.arm`` waits a grace for an inline drive; an admitted
    run has none, so the next maintenance pass drives it)."""
    timer = timers.timer_key(shards, timers.WAKE, run_id, now)
    return [
        Put(keys.wake_key(run_id), encode({"timer": timers.timer_ref(timer)})),
        Put(timer, timers.timer_value(run_id, timers.WAKE)),
    ]
