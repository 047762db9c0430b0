"""``continue_as_new``: end a run and start the same workflow id again with a fresh history.

The continue is ONE fenced batch, conditioned on the state the drive read: the new state
(same id, type, creation time, parent and idempotency key; the new input; run number plus
one; ``first_step`` past every slot the ending run used), the deletes of the run's version
pins and finalizer registrations, and the run's wake-up moved to now. The old run's other
records are NOT deleted in that batch: a long history does not fit one batch (DynamoDB takes
100 items). They keep their keys; since runs of one id never share a step slot,
``load_history`` sets aside every record below ``first_step`` (``History.earlier``) and the
next drive deletes them in fenced chunks (``forget_earlier_runs``). A crash between the two
leaves records nobody replays and the following drive deletes; a crash before the batch
leaves the old run as it was, and its next drive reaches the same ``continue_as_new`` again.

Kept across the continue, because they are not scoped to a step: buffered signals and
signal ids, update responses, the idempotency record, the owner epoch (the claim is kept),
the execution deadline. Timers of the old run (a losing race branch's sleep, say) stay and
only wake the new run to find nothing to do (ADR 0002).
"""

from __future__ import annotations

from weft_serverless.engine.persistence import timers, wakeups
from weft_serverless.engine.persistence.records import (
    FIRST_STEP_FIELD,
    RUN_FIELD,
    RUNNING,
    History,
    WorkflowState,
)
from weft_serverless.engine.runs.commit import cleanup_chunks, commit, commit_cleanup
from weft_serverless.engine.runs.finalizers import of_history
from weft_serverless.engine.runs.transitions import open_children
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.errors import InvalidArgumentError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts
from weft_serverless.workflow import WorkflowDefinition


def continue_as_new(
    rt: Runtime,
    history: History,
    definition: WorkflowDefinition,
    new_input: bytes,
    steps_taken: int,
) -> WorkflowState:
    """Commit the continue batch; ``steps_taken`` is how many top-level slots this run used.

    Raises ``InvalidArgumentError`` (nothing written) when the run has open children, and
    ``LostCommit`` when another writer changed the state first.
    """
    state = history.state
    still_open = open_children(history.pending, history.children)
    if still_open:
        raise InvalidArgumentError(
            f"workflow {state.id!r} cannot continue as new while children are open "
            f"({', '.join(still_open)}); yield their handles, or start them with "
            "parent_close_policy='abandon'"
        )
    now = rt.now()
    extra = dict(state.extra)
    extra[RUN_FIELD] = state.run + 1
    extra[FIRST_STEP_FIELD] = state.first_step + steps_taken
    new = WorkflowState(
        id=state.id,
        type=state.type,
        version=definition.version,
        status=RUNNING,
        input=new_input,
        created_at=state.created_at,
        updated_at=now,
        parent=state.parent,
        idempotency_key=state.idempotency_key,
        extra=extra,
    )
    ops: list[Op] = [Put(keys.state_key(state.id), new.to_bytes())]
    ops += [Delete(keys.version_key(state.id, change)) for change in history.versions]
    # Finalizers belong to the run that registered them: the next run starts with none (a
    # run that took no step leaves the next one the same first slot, so they go here).
    ops += [
        Delete(keys.finalizer_key(state.id, state.first_step, position))
        for position, _ in of_history(history)
    ]
    ops += _wake_now(rt.shards, history, now)
    commit(rt, state.id, [Condition(keys.state_key(state.id), history.state_bytes)], ops)
    history.wake = None
    rt.metrics.incr("runs_continued")
    logger.info("workflow %s continued as new: run %d", state.id, new.run)
    return new


def _wake_now(shards: ShardCounts, history: History, now: float) -> list[Op]:
    """Move the run's wake-up to ``now`` (a crash right after the batch: maintenance drives
    the new run); one write per key, so no batch puts and deletes the same item."""
    timer = wakeups.wake_timer(shards, history.state.id, now)
    if history.wake == timers.timer_ref(timer):
        return []
    stale: list[Op] = [] if history.wake is None else [Delete(Key(*history.wake))]
    return stale + wakeups.arm(shards, history.state.id, now)


def forget_earlier_runs(rt: Runtime, history: History) -> None:
    """Delete the records earlier runs left (``History.earlier``), fenced, in chunks."""
    if not history.earlier:
        return
    partition = keys.workflow_partition(history.state.id)
    deletes = [Delete(Key(partition, sort)) for sort in history.earlier]
    commit_cleanup(rt, history.state.id, cleanup_chunks(rt, history.state.id, deletes))
    rt.metrics.incr("earlier_run_records_deleted", len(deletes))
    history.earlier = []
