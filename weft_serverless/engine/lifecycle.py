"""Workflow lifecycle writes: start (now or delayed), child start, and terminal transitions.

Each transition is one atomic batch that also moves the status index entry and, for an
awaited child, hands its outcome to the parent's partition with a wake-up timer, so no crash
can leave a parent waiting for a child that already finished.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.errors import (
    UnknownWorkflowTypeError,
    WeftError,
    WorkflowAlreadyExistsError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put

from . import timers, wakeups
from .commit import LostCommit, commit
from .ownership import Fragment
from .records import PENDING, RUNNING, TERMINAL, History, WorkflowState
from .retention import retention_timer
from .runtime import Runtime


def new_state(
    rt: Runtime,
    workflow_type: str,
    workflow_id: str,
    encoded_input: bytes,
    *,
    parent: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    start_at: float | None = None,
    execution_timeout: float | None = None,
) -> WorkflowState:
    definition = rt.definitions.get(workflow_type)
    if definition is None:
        known = ", ".join(sorted(rt.definitions)) or "none"
        raise UnknownWorkflowTypeError(
            f"workflow type {workflow_type!r} is not registered with this engine (registered: "
            f"{known}); pass it in Engine.create(workflows={{...}})"
        )
    now = rt.now()
    delayed = start_at is not None and start_at > now
    extra: dict[str, Any] = {}
    if delayed:
        extra["start_at"] = start_at
    if execution_timeout is not None:
        extra["deadline"] = max(now, start_at or now) + execution_timeout
    return WorkflowState(
        id=workflow_id,
        type=workflow_type,
        version=definition.version,
        status=PENDING if delayed else RUNNING,
        input=encoded_input,
        created_at=now,
        updated_at=now,
        parent=parent,
        idempotency_key=idempotency_key,
        extra=extra,
    )


def start_fragment(rt: Runtime, state: WorkflowState, epoch: bytes | None = None) -> Fragment:
    """Everything that creates a workflow: state (absent before), index entry, idempotency
    mapping, its timers, and (when it starts now) its wake-up and this engine's claim on it."""
    state_key = keys.state_key(state.id)
    fragment = Fragment(
        conditions=[Condition(state_key, None)],
        ops=[
            Put(state_key, state.to_bytes()),
            Put(keys.status_key(state.status, state.id, state.created_at), _index(state)),
        ],
    )
    if state.idempotency_key is not None:
        idem = keys.idempotency_key(state.idempotency_key)
        fragment.conditions.append(Condition(idem, None))
        fragment.ops.append(Put(idem, encode({"id": state.id})))
    for kind, due in (
        (timers.DELAYED_START, state.extra.get("start_at")),
        (timers.DEADLINE, state.extra.get("deadline")),
    ):
        if due is not None:
            fragment.ops.append(timers.arm(kind, state.id, due))
    if state.status == RUNNING:
        fragment.ops += wakeups.arm(state.id, state.created_at)
        fragment.add(rt.fence.start_fragment(state.id, epoch))
    else:
        fragment.add(Fragment(conditions=rt.fence.external_conditions()))
    return fragment


def _index(state: WorkflowState) -> bytes:
    return encode({"type": state.type})


def start_workflow(rt: Runtime, state: WorkflowState, extra_ops: list[Op] | None = None) -> str:
    """Create the run; return its id (an existing one for a repeated idempotency key)."""
    epoch: bytes | None = None
    for _ in range(2):
        fragment = start_fragment(rt, state, epoch)
        if rt.storage.conditional_batch(fragment.conditions, fragment.ops + (extra_ops or [])):
            rt.fence.claim_landed(state.id)
            rt.parked.discard(state.id)  # a new run: nothing kept under its id is its own
            return state.id
        rt.fence.forget_start(state.id)
        if rt.fence.mode == "lease":
            rt.fence.on_lost_commit(state.id)  # raises if this engine lost the store-wide lease
        if state.idempotency_key is not None:
            existing = rt.storage.get(keys.idempotency_key(state.idempotency_key))
            if existing is not None:
                workflow_id: str = decode(existing)["id"]
                if rt.storage.get(keys.state_key(workflow_id)) is None:
                    raise WorkflowAlreadyExistsError(workflow_id)  # that run was purged
                return workflow_id
        if rt.storage.get(keys.state_key(state.id)) is not None:
            break
        # The id was used before and purged: its owner epoch remains; claim on top of it.
        epoch = rt.storage.get(keys.owner_epoch_key(state.id))
        if epoch is None:
            break
    raise WorkflowAlreadyExistsError(state.id)


def child_start_fragment(
    rt: Runtime,
    parent_id: str,
    slot: str,
    workflow_type: str,
    child_id: str,
    encoded_input: bytes,
    policy: str,
    signature: str,
    epoch: bytes | None = None,
) -> Fragment | WeftError:
    """Start a child and record it as the parent's pending step; folded into one batch.

    ``epoch`` is the owner epoch a purged run of ``child_id`` left (see ``child_start_epoch``).
    """
    parent = {"id": parent_id, "slot": slot, "await": policy == "await"}
    try:
        state = new_state(rt, workflow_type, child_id, encoded_input, parent=parent)
    except WeftError as exc:
        return exc
    fragment = start_fragment(rt, state, epoch)
    pending_key = keys.pending_key(parent_id, slot)
    fragment.conditions.append(Condition(pending_key, None))
    pending = {"child_id": child_id, "policy": policy, "sig": signature}
    fragment.ops.append(Put(pending_key, encode(pending)))
    return fragment


def commit_child_start(rt: Runtime, parent_id: str, child_id: str, fragment: Fragment) -> bool:
    """Commit a child start on its own; False when refused (``child_start_epoch`` says why)."""
    try:
        commit(rt, parent_id, fragment.conditions, fragment.ops)
        rt.fence.claim_landed(child_id)
        rt.parked.discard(child_id)  # a new run: nothing kept under its id is its own
        return True
    except LostCommit:
        rt.fence.forget_start(child_id)
        return False


def child_start_epoch(rt: Runtime, parent_id: str, slot: str, child_id: str) -> bytes | None:
    """What a start of ``child_id`` for this step must build on: the owner epoch a purged run
    of that id left (None when there is none, or the mode does not fence on it).

    Raises ``WorkflowAlreadyExistsError`` when another run holds the id, and ``LostCommit``
    when this step's own child holds it: a racing writer of the same step (two engines in
    mode ``none``) started it, and the drive must re-read and replay that start.
    """
    data = rt.storage.get(keys.state_key(child_id))
    if data is None:
        return rt.fence.surviving_epoch(child_id)
    if _child_of(WorkflowState.from_bytes(data), parent_id, slot):
        raise LostCommit(parent_id)
    raise WorkflowAlreadyExistsError(child_id)


def _child_of(state: WorkflowState, parent_id: str, slot: str) -> bool:
    parent = state.parent or {}
    return parent.get("id") == parent_id and parent.get("slot") == slot


def transition_ops(
    state: WorkflowState,
    status: str,
    now: float,
    result: bytes | None,
    error: dict[str, Any] | None,
    extra: dict[str, Any] | None = None,
) -> tuple[WorkflowState, list[Op]]:
    """The new state and the writes moving a workflow to ``status`` (index move included);
    ``extra`` replaces the state's extra fields when given."""
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
        extra=state.extra if extra is None else extra,
    )
    ops: list[Op] = [Put(keys.state_key(state.id), new.to_bytes())]
    if status != state.status:
        ops.append(Delete(keys.status_key(state.status, state.id, state.created_at)))
        ops.append(Put(keys.status_key(status, state.id, state.created_at), _index(state)))
    if status in TERMINAL and state.parent and state.parent.get("await", True):
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
    return [
        Put(keys.child_result_key(parent_id, slot), encode(notice)),
        timers.arm(timers.CHILD, parent_id, now, slot),
    ]


def finish(
    rt: Runtime,
    history: History,
    status: str,
    result: bytes | None,
    error: dict[str, Any] | None,
) -> WorkflowState:
    """The workflow's own terminal commit (completed or failed), fenced on its state."""
    new, ops = transition_ops(history.state, status, rt.now(), result, error)
    ops = _result_apart_if_too_big(rt, new, ops)
    closing = bool(open_children(history.pending, history.children))
    if closing:
        ops.append(close_children_timer(new.id, rt.now()))
    ops += retention_timer(rt, new.id, status, rt.now())
    ops += wakeups.disarm(history)
    with rt.fence.release_for_terminal(new.id) as release:
        conditions = [Condition(keys.state_key(new.id), history.state_bytes), *release.conditions]
        commit(rt, new.id, conditions, ops + release.ops)
    wakeups.disarmed(history)
    if status == "completed":
        rt.metrics.workflows_completed += 1
    else:
        rt.metrics.workflows_failed += 1
    if closing:
        rt.closed_runs.append(new.id)
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


def open_children(pending: Mapping[str, dict[str, Any]], finished: Container[str]) -> list[str]:
    """Children a run must cancel when it ends (parent close policies): awaited ones that
    have not finished, and request-cancel ones. ``pending`` and ``finished`` are keyed by slot."""
    found = []
    for slot, record in pending.items():
        child_id, policy = record.get("child_id"), record.get("policy", "await")
        if child_id is None or policy == "abandon":
            continue
        if policy == "await" and slot in finished:
            continue
        found.append(child_id)
    return found


def close_children_timer(workflow_id: str, now: float) -> Put:
    """Due at once: the maintenance pass cancels the children even if this process dies
    right after the terminal commit (the inline path usually does it first)."""
    return timers.arm(timers.CLOSE_CHILDREN, workflow_id, now)
