"""Starting runs: a start (now or delayed) and a child start, each one atomic batch.

A start writes the state (absent before), its index entry, the idempotency mapping, its
timers and the ownership claim together; a child start is folded into its parent's step.
Status changes after that live in ``transitions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.engine.ownership import Fragment
from weft_serverless.engine.persistence import index_entries, timers, wakeups
from weft_serverless.engine.persistence.records import PENDING, RUNNING, WorkflowState
from weft_serverless.engine.persistence.stored_records import PendingRecord
from weft_serverless.engine.runs import concurrency
from weft_serverless.engine.runs.commit import LostCommit, commit, write_claiming
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import (
    StorageUnavailableError,
    UnknownWorkflowTypeError,
    WeftError,
    WorkflowAlreadyExistsError,
    WorkflowConcurrencyLimitExceededError,
)
from weft_serverless.search_attributes import check_tags, check_values
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put


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
    search_attributes: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> WorkflowState:
    definition = rt.definitions.get(workflow_type)
    if definition is None:
        known = ", ".join(sorted(rt.definitions)) or "none"
        raise UnknownWorkflowTypeError(
            f"workflow type {workflow_type!r} is not registered with this engine (registered: "
            f"{known}); pass it in Engine.create(workflows={{...}})"
        )
    attributes = check_values(definition.search_attributes, search_attributes or {}, workflow_type)
    now = rt.now()
    delayed = start_at is not None and start_at > now
    extra: dict[str, Any] = index_entries.with_visibility({}, attributes, check_tags(tags))
    if delayed:
        extra["start_at"] = start_at
    if execution_timeout is not None:
        extra["deadline"] = max(now, start_at or now) + execution_timeout
    if rt.tracer is not None:  # the run's trace, carried across invocations (tracing.py)
        extra["trace"] = rt.tracer.new_traceparent(workflow_id, workflow_type)
    state = WorkflowState(
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
    index_entries.check_fits(state)
    concurrency.declare(rt, state)
    return state


def start_fragment(rt: Runtime, state: WorkflowState, epoch: bytes | None = None) -> Fragment:
    """Everything that creates a workflow: state (absent before), index entry, idempotency
    mapping, its timers, and (when it starts now) its wake-up and this engine's claim on it."""
    state_key = keys.state_key(state.id)
    fragment = Fragment(
        conditions=[Condition(state_key, None)],
        ops=[
            Put(state_key, state.to_bytes()),
            *index_entries.index_ops(rt.shard_layout, None, state),
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
            fragment.ops.append(timers.arm(rt.shards, kind, state.id, due))
    if state.status == RUNNING:
        fragment.ops += wakeups.arm(rt.shards, state.id, state.created_at)
        fragment.add(rt.fence.start_fragment(state.id, epoch))
    else:
        fragment.add(Fragment(conditions=rt.fence.external_conditions()))
    return fragment


_SLOT_RACES = 100
"""Starts refused because racing starts took the slot this one picked, before giving up."""


def start_workflow(rt: Runtime, state: WorkflowState, extra_ops: list[Op] | None = None) -> str:
    """Create the run; return its id (an existing one for a repeated idempotency key).

    A type with a concurrency limit takes a slot in the same batch (``state`` then says
    whether it starts or waits queued); a refusal re-reads the slots and tries again.
    """
    epoch: bytes | None = None
    for attempt in range(_SLOT_RACES):
        try:
            limit = concurrency.acquire(rt, state)
        except WorkflowConcurrencyLimitExceededError:
            started = _started_before(rt, state)
            if started is not None:
                return started
            raise
        fragment = start_fragment(rt, state, epoch)
        fragment.add(limit)
        if write_claiming(rt, state.id, fragment.conditions, fragment.ops + (extra_ops or [])):
            rt.parked.discard(state.id)  # a new run: nothing kept under its id is its own
            return state.id
        earlier = _started_before(rt, state)  # raises when the id is another run's
        if earlier is not None:
            return earlier
        # The id was used before and purged: its owner epoch remains; claim on top of it.
        surviving = rt.storage.get(keys.owner_epoch_key(state.id))
        if surviving is not None and surviving != epoch and attempt < 1:
            epoch = surviving
            continue
        if not limit.conditions:
            break
        # A racing start took the slot (or queue place) this one picked: read them again.
    else:
        raise WeftError(f"the start of {state.id!r} kept racing other starts; try again")
    raise WorkflowAlreadyExistsError(state.id)


def _started_before(rt: Runtime, state: WorkflowState) -> str | None:
    """A start refused by a full concurrency key may repeat a start that landed: it gets
    that run's id (a repeated idempotency key) or ``WorkflowAlreadyExistsError`` (a taken
    id), as it would with a free slot; None when it is a new start."""
    if state.idempotency_key is not None:
        existing = rt.storage.get(keys.idempotency_key(state.idempotency_key))
        if existing is not None:
            workflow_id: str = decode(existing)["id"]
            if rt.storage.get(keys.state_key(workflow_id)) is None:
                raise WorkflowAlreadyExistsError(workflow_id)  # that run was purged
            return workflow_id
    if rt.storage.get(keys.state_key(state.id)) is not None:
        raise WorkflowAlreadyExistsError(state.id)
    return None


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
    *,
    search_attributes: Mapping[str, Any] | None = None,
    tags: Iterable[str] = (),
) -> Fragment | WeftError:
    """Start a child and record it as the parent's pending step; folded into one batch.

    ``epoch`` is the owner epoch a purged run of ``child_id`` left (see ``child_start_epoch``).
    """
    parent = {"id": parent_id, "slot": slot, "await": policy == "await"}
    try:
        state = new_state(
            rt,
            workflow_type,
            child_id,
            encoded_input,
            parent=parent,
            search_attributes=search_attributes,
            tags=tags,
        )
        limit = concurrency.acquire(rt, state)
    except StorageUnavailableError:
        raise  # transient: the drive fails and its wake-up retries; the child may yet start
    except WeftError as exc:
        return exc
    fragment = start_fragment(rt, state, epoch)
    fragment.add(limit)
    pending_key = keys.pending_key(parent_id, slot)
    fragment.conditions.append(Condition(pending_key, None))
    pending = PendingRecord(child_id=child_id, policy=policy, signature=signature)
    fragment.ops.append(Put(pending_key, pending.to_bytes()))
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
