"""Retention: deleting finished runs once their window has passed, and explicit purges.

A terminal transition writes a ``retention`` timer when a window is configured for its status.
A purge first deletes the state record and its index entry in one conditional batch (rotating
the owner epoch), so the run disappears atomically from ``describe`` and ``list``; the rest of
the partition is then deleted in chunks, and a crash in between is finished by the timer,
which is deleted only after. The owner epoch and the idempotency mapping are never deleted:
the epoch keeps a reused id fenced, the mapping keeps a repeated start from silently running
again.
"""

from __future__ import annotations

from typing import Literal

from weft_serverless.engine.persistence import index_entries
from weft_serverless.engine.persistence.records import TERMINAL, WorkflowState
from weft_serverless.engine.runs.commit import delete_fenced, write
from weft_serverless.engine.runs.finalizers import pending_teardown
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import (
    InvalidArgumentError,
    TeardownPendingError,
    WorkflowBusyError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op

PurgeOutcome = Literal["purged", "not-finished", "kept", "raced", "teardown-pending"]


def purge_now(rt: Runtime, workflow_id: str) -> None:
    """``Engine.purge``: delete a finished run now, or say why it cannot be."""
    outcome = purge(rt, workflow_id)
    if outcome == "not-finished":
        raise InvalidArgumentError(
            f"workflow {workflow_id!r} has not finished; cancel it first, then purge"
        )
    if outcome == "teardown-pending":
        raise TeardownPendingError(workflow_id, "purge")
    if outcome == "raced":
        raise WorkflowBusyError(f"workflow {workflow_id!r} changed while purging; retry")


def purge(rt: Runtime, workflow_id: str, *, when_due: bool = False) -> PurgeOutcome:
    """Delete a finished run; idempotent, and safe to repeat after a crash part-way.

    With ``when_due`` (a retention timer firing) the run is kept unless its current status
    has a window that has passed since it ended: a run retried since then, or ended again
    with another status, is judged by its latest end. A run whose teardown is pending is
    left alone (its retention timer fires again later).
    """
    state_key = keys.state_key(workflow_id)
    current = rt.storage.get(state_key)
    if current is not None:
        state = WorkflowState.from_bytes(current)
        if state.status not in TERMINAL:
            return "not-finished"
        window = rt.retention.get(state.status)
        if when_due and (window is None or rt.now() < state.updated_at + window):
            return "kept"
        if pending_teardown(rt, workflow_id):
            return "teardown-pending"  # its finalizers need the partition: purge after them
        rotation = rt.fence.rotate_fragment(workflow_id)
        conditions = [Condition(state_key, current), *rotation.conditions]
        ops: list[Op] = [
            Delete(state_key),
            # the status entry, attribute and tag items
            *index_entries.index_ops(rt.shard_layout, state, None),
            *rotation.ops,
        ]
        if not write(rt, conditions, ops, check=False):
            return "raced"
    partition = keys.workflow_partition(workflow_id)
    rest = [
        Key(partition, sort)
        for sort, _ in rt.storage.scan(partition)
        if sort not in (keys.OWNER_EPOCH, keys.STATE)
    ]
    delete_fenced(rt, rest)  # under lease: a deposed engine deletes nothing
    rt.metrics.incr("workflows_purged")
    return "purged"
