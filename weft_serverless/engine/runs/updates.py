"""Updates: validated, durable changes to a parked workflow's state, with a result.

An update is applied where the workflow is parked (top-level step ``n``): the handler runs,
and its record (name, payload) and response land in one commit. Replay re-applies recorded
updates at step ``n`` before answering that step, so the state they built comes back. A
rejected or failing update stores nothing, and the drive that tried it is abandoned so no
half-changed in-memory state survives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from weft_serverless.codec import decode, decode_record
from weft_serverless.commands import All, Command, Race, WaitUntil
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.persistence import wakeups
from weft_serverless.engine.persistence.records import History
from weft_serverless.engine.persistence.stored_records import UpdateRecord, UpdateResponse
from weft_serverless.engine.persistence.timers import timer_ref
from weft_serverless.engine.runs.commit import commit
from weft_serverless.engine.runs.update_verdicts import validate
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import (
    CodecError,
    NondeterminismError,
    PayloadTooLargeError,
    UnknownUpdateError,
    UpdateFailedError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put


@dataclass(slots=True)
class IncomingUpdate:
    update_id: str
    name: str
    payload: bytes
    applied: bool = False
    result: Any = None


def replay_applied(ctx: WorkflowContext, history: History, slot: str) -> None:
    """Re-apply the updates recorded while the workflow was parked at ``slot``."""
    for stored in history.updates_applied.get(slot, ()):
        raw = decode_record(stored, f"an update applied to workflow {ctx.workflow_id!r}")
        record = UpdateRecord.from_map(raw)
        entry = ctx.update_handlers.get(record.name)
        if entry is None:
            raise NondeterminismError(
                keys.describe_slot(slot), f"update:{record.name}", "no such update handler"
            )
        entry[0](decode(record.payload))


def apply_incoming(
    rt: Runtime,
    ctx: WorkflowContext,
    history: History,
    slot: str,
    update: IncomingUpdate,
    parked_on: Command[Any],
) -> None:
    """Validate, run and commit one update at the park point ``slot`` (parked on ``parked_on``)."""
    entry = ctx.update_handlers.get(update.name)
    if entry is None:
        known = ", ".join(sorted(ctx.update_handlers)) or "none"
        raise UnknownUpdateError(
            f"workflow {ctx.workflow_id!r} has no update handler {update.name!r} where it is "
            f"parked (handlers: {known})"
        )
    handler, validator = entry
    payload = decode(update.payload)
    if validator is not None:
        validate(validator, payload, update.name)
    try:
        result = handler(payload)
    except Exception as exc:
        raise UpdateFailedError(update.name, type(exc).__name__, str(exc)) from None
    try:
        encoded = rt.encode_payload(result, f"result of update {update.name!r}")
    except (CodecError, PayloadTooLargeError) as exc:
        raise UpdateFailedError(update.name, exc.code, str(exc)) from None
    applied = history.updates_applied.setdefault(slot, [])
    now = rt.now()
    applied_key = keys.update_applied_key(ctx.workflow_id, slot, len(applied))
    response_key = keys.update_response_key(ctx.workflow_id, update.update_id)
    record = UpdateRecord(update.update_id, update.name, update.payload, now).to_bytes()
    ops: list[Op] = [
        Put(applied_key, record),
        Put(response_key, UpdateResponse(encoded, update.name, now).to_bytes()),
    ]
    # An update that lets the run move on keeps a wake-up with it until the run parks again;
    # one that leaves it parked needs none (and then costs no disarm write).
    arming = history.wake is None and may_move_on(parked_on)
    ops += wakeups.arm(rt.shards, ctx.workflow_id, now) if arming else []
    commit(rt, ctx.workflow_id, [Condition(applied_key, None), Condition(response_key, None)], ops)
    history.note(ops)
    if arming:
        history.wake = timer_ref(wakeups.wake_timer(rt.shards, ctx.workflow_id, now))
    applied.append(record)
    update.applied, update.result = True, decode(encoded)


def may_move_on(cmd: Command[Any]) -> bool:
    """Whether a run parked on ``cmd`` may move on once an update has run: only a condition
    can be released by one (sleeps, signals and activities wait on other records). A
    condition that holds, or raises (the error is thrown at the yield), moves it on."""
    if isinstance(cmd, WaitUntil):
        try:
            return bool(cmd.predicate())
        except Exception:
            return True
    if isinstance(cmd, All | Race):
        return any(may_move_on(branch) for branch in cmd.commands)
    return False
