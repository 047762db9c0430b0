"""Committing a step: the op record and everything that must land with it, in ONE batch.

A step is written once (condition: its op record is absent) together with its side effects
(signal consumption, timer changes) and the fence conditions of the ownership mode. A crash
therefore leaves either the whole step or none of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put

from .ownership import merge_conditions
from .runtime import Runtime


class LostCommit(Exception):
    """Internal: another writer committed this step first; the drive must re-read and retry."""


def commit(
    rt: Runtime, workflow_id: str, conditions: Sequence[Condition], ops: Sequence[Op]
) -> None:
    """Commit a workflow-scoped batch with the fence added; raise ``LostCommit`` if refused.

    ``conditions`` may already hold the fence (a child start's fragment does): it is added
    once however the batch was put together.
    """
    fence = rt.fence
    with fence.exclusive(workflow_id):
        fence.flush(workflow_id)  # a step a head commit left inline lands first (ADR 0037)
        extra = fence.conditions(workflow_id)
        fenced = merge_conditions(conditions, extra) if extra or len(conditions) > 1 else conditions
        if fenced:
            ok = rt.storage.conditional_batch(fenced, ops)
        else:
            rt.storage.batch(ops)
            ok = True
    if not ok:
        rt.metrics.lost_commits += 1
        rt.fence.on_lost_commit(workflow_id)
        raise LostCommit(workflow_id)


def commit_on_head(
    rt: Runtime,
    workflow_id: str,
    slot: str,
    record: bytes,
    expected: bytes | None,
    blob: Put | None = None,
) -> None:
    """Commit a plain step (its op record and nothing else) as the run's new head: one
    single-item write where a fenced batch is a transaction (ADR 0037). ``expected`` is what
    the step's slot held when read, for the record's later write-out; ``blob`` is a large
    record ``record`` names, put first."""
    if not rt.fence.commit_on_head(workflow_id, slot, record, expected, blob):
        rt.metrics.lost_commits += 1
        rt.fence.on_lost_commit(workflow_id)
        raise LostCommit(workflow_id)


def cleanup_chunks(rt: Runtime, workflow_id: str, cleanup: Sequence[Op]) -> list[list[Op]]:
    """``cleanup`` (each key once) in batches that fit beside the fence, for
    ``commit_cleanup``; nothing to clean costs nothing (every plain step asks)."""
    if not cleanup:
        return []
    size = max(1, rt.storage.capabilities().max_batch_ops - len(rt.fence.conditions(workflow_id)))
    unique = list({op.key: op for op in cleanup}.values())
    return [unique[start : start + size] for start in range(0, len(unique), size)]


def commit_step(
    rt: Runtime,
    workflow_id: str,
    conditions: Sequence[Condition],
    ops: Sequence[Op],
    cleanup: Sequence[Op],
) -> list[list[Op]]:
    """Commit a step's batch plus as many of its ``cleanup`` deletes as the batch has room for.

    ``cleanup`` deletes timers the step made stale. A stale timer only wakes the workflow to
    find nothing to do (ADR 0002), so these deletes are not part of the step's atomicity: the
    ones that do not fit are returned in chunks for ``commit_cleanup`` after the step, and a
    crash in between leaves only harmless wake-ups. The step's own writes are never split;
    if they exceed the batch limit the storage refuses them with ``StorageLimitError``.
    """
    if not cleanup:  # most steps: nothing to fit in, the batch is the step's own writes
        commit(rt, workflow_id, conditions, ops)
        return []
    fence = rt.fence.conditions(workflow_id)
    taken = {c.key for c in (*conditions, *fence)} | {op.key for op in ops}
    extra = list({op.key: op for op in cleanup if op.key not in taken}.values())
    limit = rt.storage.capabilities().max_batch_ops
    room = max(0, limit - len(taken))
    commit(rt, workflow_id, conditions, [*ops, *extra[:room]])
    return cleanup_chunks(rt, workflow_id, extra[room:])


def commit_cleanup(rt: Runtime, workflow_id: str, chunks: Sequence[Sequence[Op]]) -> None:
    """Apply the cleanup chunks ``commit_step`` left over, each fenced like any write."""
    for chunk in chunks:
        commit(rt, workflow_id, [], chunk)


def delete_fenced(rt: Runtime, doomed: Sequence[Key]) -> None:
    """Delete records no run's fence covers (fired timers, a purged run's leftovers) in
    chunks, each under the fence every outside write carries: under ``lease`` the store
    lease, so an engine that lost it deletes nothing."""
    fence = rt.fence.external_conditions()
    if not fence:
        rt.storage.delete_many(doomed)
        return
    size = rt.storage.capabilities().max_batch_ops - len(fence)
    for start in range(0, len(doomed), size):
        chunk: list[Op] = [Delete(key) for key in doomed[start : start + size]]
        if not rt.storage.conditional_batch(fence, chunk):
            rt.fence.on_lost_commit(doomed[0].partition)


def decode_value(record: dict[str, Any]) -> Any:
    data = record.get("v")
    return None if data is None else decode(data)
