"""Workflow lifecycle writes: start, child start, terminal transitions, cancel.

Each transition is one atomic batch that also moves the status index entry and, for a child,
hands its outcome to the parent's partition with a wake-up timer, so no crash can leave a
parent waiting for a child that already finished.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.errors import (
    UnknownWorkflowTypeError,
    WeftError,
    WorkflowAlreadyExistsError,
    WorkflowNotFoundError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put

from .commit import LostCommit, commit, timer_value
from .records import RUNNING, TERMINAL, History, WorkflowState
from .runtime import Runtime


def new_state(
    rt: Runtime,
    workflow_type: str,
    workflow_id: str,
    encoded_input: bytes,
    *,
    parent: dict[str, str] | None = None,
    idempotency_key: str | None = None,
    status: str = RUNNING,
) -> WorkflowState:
    definition = rt.definitions.get(workflow_type)
    if definition is None:
        known = ", ".join(sorted(rt.definitions)) or "none"
        raise UnknownWorkflowTypeError(
            f"workflow type {workflow_type!r} is not registered with this engine (registered: "
            f"{known}); pass it in Engine.create(workflows={{...}})"
        )
    now = rt.now()
    return WorkflowState(
        id=workflow_id,
        type=workflow_type,
        version=definition.version,
        status=status,
        input=encoded_input,
        created_at=now,
        updated_at=now,
        parent=parent,
        idempotency_key=idempotency_key,
    )


def start_batch(state: WorkflowState) -> tuple[list[Condition], list[Op]]:
    """The writes that create a workflow: state (must be absent) and its index entry."""
    state_key = keys.state_key(state.id)
    index_value = encode({"type": state.type})
    conditions = [Condition(state_key, None)]
    ops: list[Op] = [
        Put(state_key, state.to_bytes()),
        Put(keys.status_key(state.status, state.id, state.created_at), index_value),
    ]
    if state.idempotency_key is not None:
        idem = keys.idempotency_key(state.idempotency_key)
        conditions.append(Condition(idem, None))
        ops.append(Put(idem, encode({"id": state.id})))
    return conditions, ops


def start_workflow(rt: Runtime, state: WorkflowState) -> str:
    """Create the run; return its id (an existing one for a repeated idempotency key)."""
    conditions, ops = start_batch(state)
    claim = rt.fence.start_fragment(state.id)
    if rt.storage.conditional_batch(conditions + claim.conditions, ops + claim.ops):
        return state.id
    rt.fence.forget_start(state.id)
    if state.idempotency_key is not None:
        existing = rt.storage.get(keys.idempotency_key(state.idempotency_key))
        if existing is not None:
            workflow_id: str = decode(existing)["id"]
            return workflow_id
    raise WorkflowAlreadyExistsError(state.id)


def start_child(
    rt: Runtime, parent_id: str, slot: str, workflow_type: str, child_id: str, encoded_input: bytes
) -> dict[str, Any] | WeftError:
    """Start a child and record it as the parent's pending step, in one batch."""
    try:
        state = new_state(
            rt, workflow_type, child_id, encoded_input, parent={"id": parent_id, "slot": slot}
        )
    except WeftError as exc:
        return exc
    conditions, ops = start_batch(state)
    pending = {"child_id": child_id}
    pending_key = keys.pending_key(parent_id, slot)
    conditions.append(Condition(pending_key, None))
    ops.append(Put(pending_key, encode(pending)))
    claim = rt.fence.start_fragment(child_id)
    conditions += claim.conditions + rt.fence.conditions(parent_id)
    if rt.storage.conditional_batch(conditions, ops + claim.ops):
        return pending
    rt.fence.forget_start(child_id)
    if rt.storage.get(pending_key) is not None:
        raise LostCommit(parent_id)
    return WorkflowAlreadyExistsError(child_id)


def transition_ops(
    state: WorkflowState,
    status: str,
    now: float,
    result: bytes | None,
    error: dict[str, Any] | None,
) -> tuple[WorkflowState, list[Op]]:
    """The new state and the writes moving a workflow to ``status`` (index move included)."""
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
        extra=state.extra,
    )
    ops: list[Op] = [Put(keys.state_key(state.id), new.to_bytes())]
    if status != state.status:
        ops.append(Delete(keys.status_key(state.status, state.id, state.created_at)))
        ops.append(
            Put(keys.status_key(status, state.id, state.created_at), encode({"type": state.type}))
        )
    if status in TERMINAL and state.parent:
        ops.extend(_parent_notice(state, status, now, result, error))
    return new, ops


def _parent_notice(
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
    timer = keys.timer_key(now, parent_id, "c" + slot)
    return [
        Put(keys.child_result_key(parent_id, slot), encode(notice)),
        Put(timer, timer_value(parent_id, "child")),
    ]


def finish(
    rt: Runtime, history: History, status: str, result: bytes | None, error: dict[str, Any] | None
) -> WorkflowState:
    """The workflow's own terminal commit (completed or failed), fenced on its state."""
    new, ops = transition_ops(history.state, status, rt.now(), result, error)
    with rt.fence.release_for_terminal(new.id) as release:
        conditions = [Condition(keys.state_key(new.id), history.state_bytes), *release.conditions]
        commit(rt, new.id, conditions, ops + release.ops)
    if status == "completed":
        rt.metrics.workflows_completed += 1
    else:
        rt.metrics.workflows_failed += 1
    return new


def cancel(rt: Runtime, workflow_id: str) -> WorkflowState:
    """Move a non-terminal workflow to ``cancelled``; a terminal one is returned unchanged."""
    for _ in range(10):
        current = rt.storage.get(keys.state_key(workflow_id))
        if current is None:
            raise WorkflowNotFoundError(workflow_id)
        state = WorkflowState.from_bytes(current)
        if state.status in TERMINAL:
            return state
        new, ops = transition_ops(state, "cancelled", rt.now(), None, None)
        rotation = rt.fence.rotate_fragment(workflow_id)
        conditions = [Condition(keys.state_key(workflow_id), current), *rotation.conditions]
        if rt.storage.conditional_batch(conditions, ops + rotation.ops):
            return new
    raise WeftError(f"cancel of {workflow_id!r} kept racing other writers; try again")
