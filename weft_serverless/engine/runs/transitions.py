"""Status changes: the writes that move a run from one status to another, written once.

Every move (a run's own end in ``finish``, and the moves made from outside in ``control``)
puts the new state, moves its status index entry and, when it is terminal, brings the same
extras: the outcome handed to an awaiting parent with its wake-up timer, the close-children
timer when the run leaves children open, and the retention timer of its status. Once such a
batch has committed, ``ended`` tells the engine which closed runs have children to close.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from weft_serverless.codec import encode
from weft_serverless.engine.persistence import index_entries, timers, wakeups
from weft_serverless.engine.persistence.records import TERMINAL, History, WorkflowState
from weft_serverless.engine.persistence.stored_records import PendingRecord
from weft_serverless.engine.runs import concurrency, event_log, finalizers, outbox
from weft_serverless.engine.runs.commit import commit
from weft_serverless.engine.runtime import Runtime
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts


def move(
    rt: Runtime,
    state: WorkflowState,
    status: str,
    *,
    result: bytes | None = None,
    error: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    closing: bool = False,
    registered: finalizers.Registered = (),
) -> tuple[WorkflowState, list[Op]]:
    """The new state and every write moving a run to ``status`` at ``rt.now()``.

    ``extra`` replaces the state's extra fields when given; ``closing`` says the run leaves
    children its close policies must cancel (only meaningful for a terminal ``status``);
    ``registered`` are the run's finalizers, whose teardown a terminal batch arms.
    """
    now = rt.now()
    new = WorkflowState(
        id=state.id,
        type=state.type,
        version=state.version,
        status=status,
        input=state.input,
        created_at=state.created_at,
        updated_at=now,
        result=result,
        error=error,
        parent=state.parent,
        idempotency_key=state.idempotency_key,
        extra=state.extra if extra is None else _kept(state.extra, extra),
    )
    ops: list[Op] = [Put(keys.state_key(state.id), new.to_bytes())]
    if status != state.status:
        # the status entry, attribute and tag items
        ops += index_entries.index_ops(rt.shard_layout, state, new)
    if status not in TERMINAL:
        return new, ops
    # in the terminal batch: never leaked nor doubled
    ops += concurrency.release(rt.shards, state, now)
    if state.parent and state.parent.get("await", True):
        ops.extend(_parent_notice(rt.shards, state, status, now, result, error))
    if closing:
        # Due at once: the maintenance pass cancels the children even if this process dies
        # right after the terminal commit (the inline path usually does it first).
        ops.append(timers.arm(rt.shards, timers.CLOSE_CHILDREN, state.id, now))
    if state.extra.get("schedule_wake"):
        # A run of an overlap="queue" schedule ended: its queued fire may start now.
        ops.append(timers.arm(rt.shards, timers.SCHEDULE, state.extra["schedule"], now))
    ops += finalizers.arm_teardown(rt.shards, state, status, list(registered), now)
    ops += outbox.item(rt, event_log.terminal_event(new))  # only with an event sink
    window = rt.retention.get(status)
    if window is not None:
        ops.append(timers.arm(rt.shards, timers.RETENTION, state.id, now + window))
    return new, ops


def _kept(old: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """New extra fields keep the run's search attributes and tags: only their own step and
    the start set them, so a move never drops them (nor their index items)."""
    return index_entries.with_visibility(
        extra,
        dict(
            extra.get(index_entries.ATTRIBUTES_FIELD)
            or old.get(index_entries.ATTRIBUTES_FIELD)
            or {}
        ),
        list(extra.get(index_entries.TAGS_FIELD) or old.get(index_entries.TAGS_FIELD) or []),
    )


def ended(rt: Runtime, state: WorkflowState, closing: bool, torn_down: bool = False) -> None:
    """A terminal batch from ``move`` committed: stop its activity attempts running here, note
    a run that left children to close, one whose batch armed a teardown (``torn_down``), and
    a concurrency key whose freed slot has runs queued behind it."""
    if state.status in TERMINAL:
        rt.attempts.cancel(state.id)
    if closing:
        rt.closed_runs.notify(state.id)
    if torn_down:
        rt.teardowns.notify(state.id)
    gate = concurrency.freed_gate(state)
    if gate is not None:
        rt.freed_gates.notify(gate)


def _parent_notice(
    shards: ShardCounts,
    state: WorkflowState,
    status: str,
    now: float,
    result: bytes | None,
    error: dict[str, Any] | None,
) -> list[Op]:
    assert state.parent is not None
    parent_id, slot = state.parent["id"], state.parent["slot"]
    notice: dict[str, Any] = {"child_id": state.id, "status": status, "v": result}
    if error is not None:
        notice["type"] = error.get("type", "")
        notice["message"] = error.get("message", "")
    elif status != "completed":
        notice["type"] = "WorkflowCancelledError" if status == "cancelled" else status
        notice["message"] = f"child workflow {state.id!r} ended {status}"
    return [
        Put(keys.child_result_key(parent_id, slot), encode(notice)),
        timers.arm(shards, timers.CHILD, parent_id, now, slot),
    ]


def finish(
    rt: Runtime,
    history: History,
    status: str,
    result: bytes | None,
    error: dict[str, Any] | None,
) -> WorkflowState:
    """The workflow's own terminal commit (completed or failed), fenced on its state."""
    closing = bool(open_children(history.pending, history.children))
    registered = finalizers.of_history(history)
    new, ops = move(
        rt,
        history.state,
        status,
        result=result,
        error=error,
        closing=closing,
        registered=registered,
    )
    ops = _result_apart_if_too_big(rt, new, ops)
    ops += wakeups.disarm(history)
    with rt.fence.release_for_terminal(new.id) as release:
        conditions = [Condition(keys.state_key(new.id), history.state_bytes), *release.conditions]
        commit(rt, new.id, conditions, ops + release.ops)
    wakeups.disarmed(history)
    if status == "completed":
        rt.metrics.workflows_completed += 1
    else:
        rt.metrics.workflows_failed += 1
    ended(rt, new, closing, finalizers.armed(ops, new.id))
    return new


def _result_apart_if_too_big(rt: Runtime, new: WorkflowState, ops: list[Op]) -> list[Op]:
    """Move the result to its own record when input and result together overflow one value.

    Each payload fits a record on its own (``payload_limit``), but the state record holds
    the input too: without this a run within the limits could never commit its end.
    """
    state_put = ops[0]
    assert isinstance(state_put, Put) and state_put.key == keys.state_key(new.id)
    if new.result is None or len(state_put.value) <= rt.storage.capabilities().max_value_bytes:
        return ops
    result, new.result, new.result_apart = new.result, None, True
    return [Put(state_put.key, new.to_bytes()), Put(keys.result_key(new.id), result), *ops[1:]]


def open_children(pending: Mapping[str, PendingRecord], finished: Container[str]) -> list[str]:
    """Children a run must cancel when it ends (parent close policies): awaited ones that
    have not finished, and request-cancel ones. ``pending`` and ``finished`` are keyed by slot."""
    found = []
    for slot, record in pending.items():
        child_id, policy = record.child_id, record.policy or "await"
        if child_id is None or policy == "abandon":
            continue
        if policy == "await" and slot in finished:
            continue
        found.append(child_id)
    return found
