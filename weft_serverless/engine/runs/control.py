"""Transitions made from outside a run: cancel, time out, suspend, resume, retry, delayed start.

Cancel, timeout and suspend rotate the workflow's owner epoch in the same batch (under
workflow-lease), so an owner still running it elsewhere cannot land another write. Resume,
retry and a delayed start's activation re-acquire a claim for this engine in their batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from weft_serverless.codec import decode_record, encode
from weft_serverless.engine.ownership import Fragment
from weft_serverless.engine.persistence import retry_history, run_head, timers, wakeups
from weft_serverless.engine.persistence.records import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUSPENDED,
    TERMINAL,
    TIMED_OUT,
    WorkflowState,
    error_record,
    load_history,
)
from weft_serverless.engine.persistence.stored_records import AttemptRecord, PendingRecord
from weft_serverless.engine.runs import concurrency, event_log, finalizers, outbox, transitions
from weft_serverless.engine.runs.commit import write, write_claiming
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import (
    InvalidArgumentError,
    TeardownPendingError,
    WeftError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts

_ATTEMPTS = 10
Extra = Callable[[WorkflowState], list[Op]]
Target = Callable[[WorkflowState], str]
Fields = Callable[[WorkflowState], dict[str, Any]]
SUSPENDED_FROM = "suspended_from"


def _transition(
    rt: Runtime,
    workflow_id: str,
    to_status: str | Target,
    allowed: frozenset[str],
    *,
    rotate: bool,
    error: dict[str, object] | None = None,
    extra: Extra | None = None,
    fields: Fields | None = None,
    taking: Callable[[WorkflowState], Fragment] | None = None,
    once: Key | None = None,
) -> tuple[WorkflowState, WorkflowState | None]:
    """CAS the state from an allowed status to ``to_status`` (or the status it picks from the
    state read); returns (before, after or None). ``fields`` gives the new state's extra
    fields; ``taking`` the concurrency slot the move takes (from the new state). Only a
    move to running claims the run: no engine holds a pending one. ``once``: a marker key
    written with the move and required absent, so the move is made at most once per marker
    (a bulk operation resumed after a crash); a marker found present means no move."""
    for _ in range(_ATTEMPTS):
        current = rt.storage.get(keys.state_key(workflow_id))
        if current is None:
            raise WorkflowNotFoundError(workflow_id)
        state = WorkflowState.from_bytes(current)
        if state.status not in allowed:
            return state, None
        if once is not None and rt.storage.get(once) is not None:
            return state, None
        target = to_status if isinstance(to_status, str) else to_status(state)
        new_fields = fields(state) if fields else None
        # A running run's drive may start a child between a read of its children and this
        # batch (nothing a child's start writes is in it): its end always closes children,
        # read once it has landed (inline, and by the close-children timer, due at once).
        closing = target in TERMINAL and (
            state.status == RUNNING or bool(children_to_close(rt, workflow_id))
        )
        registered: finalizers.Registered = []
        no_later: list[Condition] = []  # a registration landing after the read fails the CAS
        if target in finalizers.ENDS:
            registered, following = finalizers.read_registered(rt, state)
            no_later.append(following)
        new, ops = transitions.move(
            rt, state, target, error=error, extra=new_fields, closing=closing, registered=registered
        )
        claiming = not rotate and target == RUNNING
        if rotate:
            fragment = rt.fence.rotate_fragment(workflow_id)
        elif claiming:
            fragment = rt.fence.resume_fragment(workflow_id)
        else:
            fragment = Fragment()  # the store-wide fence only: ``write`` adds it
        if taking is not None:
            fragment.add(taking(new))
        conditions = [
            Condition(keys.state_key(workflow_id), current),
            *fragment.conditions,
            *no_later,
            *([] if once is None else [Condition(once, None)]),
        ]
        ops += fragment.ops + (extra(state) if extra else [])
        ops += _replaced_wake(rt, workflow_id, target in TERMINAL, ops)
        if once is not None:
            ops.append(Put(once, encode({"at": rt.now()})))
        if claiming:
            landed = write_claiming(rt, workflow_id, conditions, ops)
        else:
            landed = write(rt, conditions, ops)
        if landed:
            if target in TERMINAL:
                rt.parked.discard(workflow_id)  # ended from outside: its finally runs now
            transitions.ended(rt, new, closing, finalizers.armed(ops, workflow_id))
            return state, new
    raise WeftError(f"{target} of {workflow_id!r} kept racing other writers; try again")


def _replaced_wake(rt: Runtime, workflow_id: str, ending: bool, ops: list[Op]) -> list[Op]:
    """A move from outside that ends the run, or arms it a new wake-up, drops the wake-up
    stored (one point read): a finished run keeps none, and a run keeps one at a time (an
    old one left behind would wake it for nothing)."""
    pointer = keys.wake_key(workflow_id)
    if not ending and not any(isinstance(op, Put) and op.key == pointer for op in ops):
        return []
    written = {op.key for op in ops}
    return [op for op in wakeups.disarm_stored(rt.storage, workflow_id) if op.key not in written]


def cancel(rt: Runtime, workflow_id: str) -> tuple[WorkflowState, bool]:
    """Cancel a non-terminal run; returns its state and whether this call cancelled it."""
    before, after = _transition(
        rt, workflow_id, CANCELLED, frozenset({PENDING, RUNNING, SUSPENDED}), rotate=True
    )
    return (after, True) if after is not None else (before, False)


def time_out(rt: Runtime, workflow_id: str) -> bool:
    """The execution deadline fired: end the run ``timed-out`` (any engine may do this)."""
    error = error_record("workflow", "WorkflowTimedOutError", "execution timeout reached")
    _, after = _transition(
        rt,
        workflow_id,
        TIMED_OUT,
        frozenset({PENDING, RUNNING, SUSPENDED}),
        rotate=True,
        error=error,
    )
    return after is not None


def suspend(rt: Runtime, workflow_id: str) -> WorkflowState:
    """Pause a run: nothing drives it until ``resume``; its due timers are collected.

    The state records whether it was pending or running, so resume puts a delayed start
    back to waiting for its start time rather than starting it early.
    """
    before, after = _transition(
        rt,
        workflow_id,
        SUSPENDED,
        frozenset({PENDING, RUNNING}),
        rotate=True,
        fields=lambda s: {**s.extra, SUSPENDED_FROM: s.status},
    )
    if after is None and before.status != SUSPENDED:
        raise WorkflowNotRunningError(workflow_id, before.status)
    return after or before


def resume_suspended(rt: Runtime, workflow_id: str) -> bool:
    """Suspended -> what it was waiting in, re-arming its timers in the same batch.

    A run suspended while pending goes back to pending with its delayed-start timer at the
    original start time, unless that time has passed (then it starts now, claimed here).
    Sleeps and timeouts keep their original due times; one that fell due meanwhile fires
    at once.
    """
    _, after = _transition(
        rt,
        workflow_id,
        lambda s: PENDING if _waits(rt, s) else RUNNING,
        frozenset({SUSPENDED}),
        rotate=False,
        extra=lambda s: _rearm(rt, s) + _resume_wake(rt, s),
        fields=lambda s: {k: v for k, v in s.extra.items() if k != SUSPENDED_FROM},
    )
    return after is not None


def _waits(rt: Runtime, state: WorkflowState) -> bool:
    """Whether a suspended run goes back to pending: its start is still ahead, or it was
    queued for a concurrency slot (only admission starts it)."""
    return _still_delayed(rt, state) or concurrency.is_queued(state)


def _resume_wake(rt: Runtime, state: WorkflowState) -> list[Op]:
    """A resumed run's wake-up: a drive's, or for a queued one its key's admit timer (a
    slot may have freed while it was suspended, and admission skipped it)."""
    if concurrency.is_queued(state):
        key = concurrency.key_of(state)
        assert key is not None
        return [concurrency.arm_admit(rt.shards, state.type, key, rt.now())]
    return [] if _still_delayed(rt, state) else wakeups.arm(rt.shards, state.id, rt.now())


def _still_delayed(rt: Runtime, state: WorkflowState) -> bool:
    """Whether a suspended run had not started yet and its start time is still ahead.

    Records suspended before the status was kept have no ``suspended_from``: a start time
    still ahead then proves the run never started (activation happens only once it is due).
    """
    start_at = state.extra.get("start_at")
    was = state.extra.get(SUSPENDED_FROM, PENDING)
    return was == PENDING and start_at is not None and start_at > rt.now()


def _rearm(rt: Runtime, state: WorkflowState) -> list[Op]:
    history = load_history(rt.storage, state.id)
    if history is None:
        return []
    ops: list[Op] = []
    records: list[tuple[str, PendingRecord | AttemptRecord]] = list(history.pending.items())
    records += [(slot, attempts[-1]) for slot, attempts in history.attempts.items() if attempts]
    for slot, record in records:
        top = keys.top_slot(slot)
        if top in history.ops or not record.timer:
            continue
        ops.append(Put(_own_key(Key(*record.timer)), timers.timer_value(state.id, timers.RESUME)))
    start_at = state.extra.get("start_at")
    if _still_delayed(rt, state) and start_at is not None:
        ops.append(_rearm_delayed_start(rt.shards, state.id, start_at))
    return ops


def _own_key(original: Key) -> Key:
    """A re-armed step timer's key: the original's shard, due time and tag, with a suffix of
    its own. A pass that read the original as due, found the run suspended and did nothing,
    deletes the key it read once done; were the resume's timer under that key, it would go
    with it, and a drive whose clock says the sleep is not due yet would park with no timer
    left to wake it (the delayed start's race below, on a sleep or a retry backoff). The
    original, if no pass took it, fires too and finds nothing more to do: a timer only
    wakes (ADR 0002)."""
    return Key(original.partition, f"{original.sort}~{uuid.uuid4().hex[:16]}")


def _rearm_delayed_start(shards: ShardCounts, workflow_id: str, start_at: float) -> Put:
    """A resumed delayed start's timer, under a key of its own rather than the one its start
    armed (same due time, same tag).

    A pass deletes the timers it read once it has acted on them, by key. One that read the
    start's timer as due (its clock a little ahead of ours), found the run suspended and did
    nothing, deletes that key after this resume lands: the re-armed timer, were it under the
    same key, would go with it, and nothing would ever start the run (it has no other timer
    and no claim). The start's own timer, if no pass took it, fires too and finds the run
    started or suspended: a timer only wakes (ADR 0002).
    """
    return timers.arm(shards, timers.DELAYED_START, workflow_id, start_at, uuid.uuid4().hex[:16])


def activate_delayed(rt: Runtime, workflow_id: str) -> bool:
    """A delayed start fell due: pending -> running, claiming it for this engine.

    A run still queued for a concurrency slot stays pending (rewritten as it is): admission
    starts it. Deciding on the state ``_transition`` reads keeps this one read and one CAS.
    """
    _, after = _transition(
        rt,
        workflow_id,
        lambda s: PENDING if concurrency.is_queued(s) else RUNNING,
        frozenset({PENDING}),
        rotate=False,
        extra=lambda s: [] if concurrency.is_queued(s) else wakeups.arm(rt.shards, s.id, rt.now()),
    )
    return after is not None and after.status == RUNNING


def retry_failed(rt: Runtime, workflow_id: str, once: Key | None = None) -> bool:
    """Failed -> running, setting the failed step aside so it runs again from its last good
    one, with the failure kept as the run's history (``once``: at most once per marker key,
    see ``_transition``)."""
    current = rt.storage.get(keys.state_key(workflow_id))
    if current is None:
        raise WorkflowNotFoundError(workflow_id)
    if WorkflowState.from_bytes(current).status != FAILED:
        raise InvalidArgumentError(
            f"workflow {workflow_id!r} is {WorkflowState.from_bytes(current).status}; "
            "only a failed workflow can be retried"
        )
    if finalizers.pending_teardown(rt, workflow_id):
        raise TeardownPendingError(workflow_id, "retry")
    _, after = _transition(
        rt,
        workflow_id,
        RUNNING,
        frozenset({FAILED}),
        rotate=False,
        extra=lambda s: _set_aside_failed_step(rt, s) + wakeups.arm(rt.shards, s.id, rt.now()),
        fields=lambda s: _retry_fields(rt, s),
        taking=_retry_slot,
        once=once,
    )
    return after is not None


def _retry_fields(rt: Runtime, state: WorkflowState) -> dict[str, Any]:
    """A retried run is active again, so it takes a slot of its key like a start (under
    either ``on_limit``: a full key refuses the retry, which never queues)."""
    fields = dict(state.extra)
    fields[retry_history.RETRIES_FIELD] = retry_history.retries_of(state) + 1
    record = fields.get(concurrency.FIELD)
    if record is not None:
        fields[concurrency.FIELD] = concurrency.retake(rt, state.type, record)
    return fields


def _retry_slot(new: WorkflowState) -> Fragment:
    record = new.extra.get(concurrency.FIELD)
    if not record or "slot" not in record:
        return Fragment()
    return concurrency.slot_fragment(new, record["slot"])


def _set_aside_failed_step(rt: Runtime, state: WorkflowState) -> list[Op]:
    """The retry's record (what it sets aside of the failure), its event, and the deletes of
    the last top-level step's records when that step holds the failure (its retry records
    stay: they are the step's history, and its next attempts are numbered after them).

    The steps are read as replay reads them (``load_history``: a run's head and the reader
    rule of ADR 0037 included). On a run with a head, the forgotten op records are replaced
    by tombstones stamped with the retry's epoch (the claim this move takes, already made):
    a write-out of the old step that lands late finds its slot taken and is refused."""
    history = load_history(rt.storage, state.id)
    if history is None:
        return []
    tops = [slot for slot in history.ops if "." not in slot]
    slot = max(tops) if tops else keys.step_slot(state.first_step)
    failed = bool(tops) and not history.ops[slot].ok
    if tops and not failed:  # the code failed after its last step: it runs on from there
        slot = keys.step_slot(keys.counter_value(slot) + 1)
    forgotten = {slot, *(s for s in history.ops if s.startswith(slot + "."))} if failed else set()
    k, record = retry_history.retry_record(history, slot, forgotten & history.ops.keys(), rt.now())
    ops: list[Op] = [Put(keys.retry_key(state.id, slot, k), encode(record))]
    ops += outbox.item(rt, event_log.retried_event(state, slot, record))
    if not failed:
        return ops
    partition = keys.workflow_partition(state.id)
    epoch = rt.fence.commit_epoch(state.id)
    if epoch is not None:
        ops += [Put(keys.op_key(state.id, s), run_head.tombstone(epoch)) for s in forgotten]
    for prefix in (
        keys.OP_PREFIX,
        keys.PENDING_PREFIX,
        keys.ASYNC_RESULT_PREFIX,
        keys.ACTIVITY_STARTED_PREFIX,
        keys.BLOB_PREFIX,
    ):
        if prefix == keys.OP_PREFIX and epoch is not None:
            continue
        ops += [
            Delete(Key(partition, sort)) for sort, _ in rt.storage.scan(partition, prefix + slot)
        ]
    return ops


def children_to_close(rt: Runtime, workflow_id: str) -> list[str]:
    """``open_children`` of a run read from storage (two prefix reads of its partition)."""
    partition = keys.workflow_partition(workflow_id)
    finished = {
        sort[len(keys.CHILD_PREFIX) :] for sort, _ in rt.storage.scan(partition, keys.CHILD_PREFIX)
    }
    pending = {
        sort[len(keys.PENDING_PREFIX) :]: PendingRecord.from_map(
            decode_record(value, f"record {sort!r} of {partition!r}")
        )
        for sort, value in rt.storage.scan(partition, keys.PENDING_PREFIX)
    }
    return transitions.open_children(pending, finished)


def close_children(rt: Runtime, workflow_id: str) -> int:
    """Cancel what a closed parent's policies say; idempotent (finished children stay)."""
    closed = 0
    for child_id in children_to_close(rt, workflow_id):
        try:
            closed += cancel(rt, child_id)[1]
        except WorkflowNotFoundError:
            continue
    return closed
