"""The engine's one write path: every storage write it makes outside the storage layer.

A run's own writes (its steps, parking, transitions) carry the fence of the run's claim
(``commit``). A step lands whole or not at all, with its side effects (signal consumption,
timer changes), on condition that its op record is as read (absent, or a void item). On a
run head (ADR 0037) a plain step is instead up to three writes: the step before it written
out to its own item, a large record put as a blob, then one conditional put of the head
carrying the step; a crash between them leaves the run readable as before the step.

Writes any engine may make (signals, starts, schedules, the outbox, maintenance) carry the
store-wide fence instead (``write``). The ownership modes write their own records (claims,
leases) through ``OwnerHost.write``: those writes are the fence. A batch is conditional when
it has a condition and plain otherwise; work that is not atomic as a whole (cleanup, purges,
moves) goes in chunks that fit beside the fence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.engine.ownership import merge_conditions
from weft_serverless.engine.persistence import run_head
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.runtime import Runtime
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put


class LostCommit(Exception):
    """Internal: another writer committed this step first; the drive must re-read and retry."""


def _send(rt: Runtime, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
    """The fence choice: a conditional batch when there is a condition, a plain one if not.

    Every batch the engine writes passes here, so this is where the timers it armed are
    hinted (ADR 0054): after the batch landed, never before."""
    if conditions:
        if not rt.storage.conditional_batch(conditions, ops):
            return False
    else:
        rt.storage.batch(ops)
    rt.hints.committed(ops)
    return True


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
        ok = _send(rt, fenced, ops)
    if not ok:
        _lost(rt, workflow_id)


def _lost(rt: Runtime, workflow_id: str) -> None:
    rt.metrics.lost_commits += 1
    rt.fence.on_lost_commit(workflow_id)
    raise LostCommit(workflow_id)


def commit_record(
    rt: Runtime,
    workflow_id: str,
    slot: str,
    record: OpRecord,
    expected: bytes | None,
    *,
    conditions: Sequence[Condition] = (),
    ops: Sequence[Op] = (),
    cleanup: Sequence[Op] = (),
) -> tuple[OpRecord, list[Op], list[list[Op]]]:
    """Commit a finished step: its op record ``record`` (in ``slot``, which held ``expected``
    when read) with the writes and conditions that must land with it, and as much of
    ``cleanup`` as fits (see ``commit_step``).

    On a run with a head, ``record`` is stamped with the claim's epoch, and a step with no
    other writes commits on the head (``commit_on_head``). Returns the writes that now stand
    for the step (to note in the history) and the cleanup chunks left for ``commit_cleanup``.
    """
    epoch = rt.fence.commit_epoch(workflow_id)
    if epoch is not None:
        record = record.fenced(epoch)
    key = keys.op_key(workflow_id, slot)
    value = record.to_bytes()
    written: list[Op] = [Put(key, value), *ops]
    if epoch is None or ops or conditions:
        batch = [Condition(key, expected), *conditions]
        return record, written, commit_step(rt, workflow_id, batch, written, cleanup)
    blob = None
    if len(value) > run_head.INLINE:  # the record goes first, the head names it
        digest, stub = run_head.reference(value, epoch)
        blob, value = Put(keys.blob_key(workflow_id, slot, digest), value), stub
        written = [Put(key, value)]
    commit_on_head(rt, workflow_id, slot, value, expected, blob)
    return record, written, cleanup_chunks(rt, workflow_id, cleanup)


def commit_on_head(
    rt: Runtime,
    workflow_id: str,
    slot: str,
    record: bytes,
    expected: bytes | None,
    blob: Put | None = None,
) -> None:
    """Commit a plain step (its op record and nothing else) as the run's new head: one
    single-item write where a fenced batch is a transaction (ADR 0037), after the step before
    it is written out and ``blob`` (a large record ``record`` names) is put. ``expected`` is
    what the step's slot held when read, for the record's later write-out."""
    if not rt.fence.commit_on_head(workflow_id, slot, record, expected, blob):
        _lost(rt, workflow_id)


def park_on_head(
    rt: Runtime, workflow_id: str, slot: str, pending: bytes, timer: Put, disarm: Sequence[Op]
) -> None:
    """Park a top-level step as the run's head (layout 4, ADR 0058): three single-item
    writes where the park was a transaction billing every item twice.

    The timer goes first, plain: landing without its park (a crash, a deposed owner), it
    fires and finds nothing to do, as any stale timer does (ADR 0002). Then one conditional
    put of the head, carrying ``pending``: the park itself, fenced as a plain step is. The
    run's wake-up (``disarm``) is deleted only after it, so a run whose park did not land
    keeps the wake-up that drives it again; landed, a wake-up left by a crash before its
    delete wakes a parked run, which finds nothing to do."""
    write(rt, [], [timer])
    if not rt.fence.park_on_head(workflow_id, slot, pending):
        _lost(rt, workflow_id)
    if disarm:  # two deletes that need not land together: no transaction
        delete_fenced(rt, [op.key for op in disarm])


def commit_deferred(rt: Runtime, workflow_id: str) -> None:
    """End a drive that claimed nothing (ADR 0059): the step it deferred lands in one
    conditional put of the head, before the timer that fired it is deleted. Refused, nothing
    of the drive landed: the generator it parked here ran past a step that is not stored, so
    it goes, and the drive is lost like any refused commit (re-read, or left to the next
    wake when another engine claimed the run)."""
    if not rt.fence.commit_deferred(workflow_id):
        rt.parked.discard(workflow_id)
        _lost(rt, workflow_id)


def room(rt: Runtime, workflow_id: str, beside: int = 0) -> int:
    """How many writes (each on its own key) one of the run's batches holds beside its fence
    and ``beside`` other conditions; at least one."""
    limit = rt.storage.capabilities().max_batch_ops
    return max(1, limit - beside - len(rt.fence.conditions(workflow_id)))


def cleanup_chunks(rt: Runtime, workflow_id: str, cleanup: Sequence[Op]) -> list[list[Op]]:
    """``cleanup`` (each key once) in batches that fit beside the fence, for
    ``commit_cleanup``; nothing to clean costs nothing (every plain step asks)."""
    if not cleanup:
        return []
    size = room(rt, workflow_id)
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
    space = max(0, limit - len(taken))
    commit(rt, workflow_id, conditions, [*ops, *extra[:space]])
    return cleanup_chunks(rt, workflow_id, extra[space:])


def commit_cleanup(rt: Runtime, workflow_id: str, chunks: Sequence[Sequence[Op]]) -> None:
    """Apply the cleanup chunks ``commit_step`` left over, each fenced like any write."""
    for chunk in chunks:
        commit(rt, workflow_id, [], chunk)


def write(
    rt: Runtime, conditions: Sequence[Condition], ops: Sequence[Op], *, check: bool = True
) -> bool:
    """One atomic batch any engine may make, outside a run's claim, with the store-wide fence
    added (once, if ``conditions`` already carry it as part of a claim or rotation).

    Returns False when refused; with ``check``, a refusal first asks whether this engine lost
    the store-wide fence (which raises, and stops it), so False means a racing writer won.
    """
    fenced = merge_conditions(conditions, rt.fence.external_conditions())
    if _send(rt, fenced, ops):
        return True
    if check:
        rt.fence.check_store_fence()
    return False


def write_claiming(
    rt: Runtime, workflow_id: str, conditions: Sequence[Condition], ops: Sequence[Op]
) -> bool:
    """A batch that moves ``workflow_id`` to running and carries this engine's claim on it
    (``conditions`` and ``ops`` hold the mode's start or resume fragment). Landed, the claim
    is live; refused, it is forgotten, and False means a racing writer won (a lost store
    fence raises)."""
    if write(rt, conditions, ops, check=False):
        rt.fence.claim_landed(workflow_id)
        return True
    rt.fence.forget_start(workflow_id)
    rt.fence.check_store_fence()
    return False


def write_moves(rt: Runtime, moves: Iterable[Sequence[Op]]) -> None:
    """Write groups of ops, each of which must land whole (a timer's delete and its put
    elsewhere), packed into batches that fit beside the store-wide fence; a crash between
    batches leaves each group in its old or its new place."""
    fence = rt.fence.external_conditions()
    size = max(2, rt.storage.capabilities().max_batch_ops - len(fence))  # one move fits
    ops: list[Op] = []
    for group in moves:
        if ops and len(ops) + len(group) > size:
            _write_chunk(rt, fence, ops)
            ops = []
        ops += group
    if ops:
        _write_chunk(rt, fence, ops)


def delete_fenced(rt: Runtime, doomed: Sequence[Key]) -> None:
    """Delete records no run's fence covers (fired timers, a purged run's leftovers) in
    chunks, each under the fence every outside write carries: under ``lease`` the store
    lease, so an engine that lost it deletes nothing."""
    fence = rt.fence.external_conditions()
    if not fence:
        rt.storage.delete_many(doomed)
        rt.hints.deleted(doomed)
        return
    size = rt.storage.capabilities().max_batch_ops - len(fence)
    for start in range(0, len(doomed), size):
        _write_chunk(rt, fence, [Delete(key) for key in doomed[start : start + size]])


def _write_chunk(rt: Runtime, fence: list[Condition], ops: list[Op]) -> None:
    """One chunk of non-atomic work: refused, it can only be a lost store fence (raises)."""
    if not _send(rt, fence, ops):
        rt.fence.on_lost_commit(ops[0].key.partition)


def decode_value(record: OpRecord) -> Any:
    """A step's stored result, decoded."""
    data = record.value
    return None if data is None else decode(data)
