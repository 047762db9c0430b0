"""Talking to a running workflow from outside: updates, queries, async activity completions.

Updates need the workflow's owner (they change its state), so they run in an exclusive drive
on this engine and raise ``WorkflowClaimUnavailableError`` (retryable) when another engine
holds it. Queries change nothing: they replay the stored history read-only, on any engine.
Async completions are durable writes any engine may make; the owner picks them up.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from weft_serverless.activity import decode_token
from weft_serverless.codec import decode, decode_record, encode
from weft_serverless.engine.config import check_dedup_id, check_name, check_text
from weft_serverless.engine.drive.guarded import KeptLosing, guarded_drive, retry_lost_commits
from weft_serverless.engine.drive.replay import replay
from weft_serverless.engine.drive.run_loop import DriveRequest
from weft_serverless.engine.ownership import EngineDeposedError
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.persistence.records import RUNNING, WorkflowState, cut_message
from weft_serverless.engine.persistence.stored_records import UpdateResponse
from weft_serverless.engine.runs.commit import write
from weft_serverless.engine.runs.update_verdicts import validate
from weft_serverless.engine.runs.updates import IncomingUpdate
from weft_serverless.engine.runtime import logger
from weft_serverless.errors import (
    ActivityTokenNotFoundError,
    UnknownQueryError,
    UpdateFailedError,
    WeftError,
    WorkflowClaimUnavailableError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Put

if TYPE_CHECKING:
    from weft_serverless.engine.drive.dispatch import Dispatcher
    from weft_serverless.engine.runtime import Runtime

DEFAULT_UPDATE_WAIT = 30.0  # how long an update waits for a drive on this engine to finish


def send_update(
    rt: Runtime,
    dispatcher: Dispatcher,
    workflow_id: str,
    name: str,
    payload: Any,
    update_id: str | None,
    timeout: float | None,
) -> Any:
    check_name(name, "name")
    if update_id is not None:
        check_dedup_id(update_id, "update_id")
    encoded = rt.encode_payload(payload, f"payload of update {name!r}")
    update = IncomingUpdate(update_id or uuid.uuid4().hex, name, encoded)
    with dispatcher.exclusive(workflow_id, DEFAULT_UPDATE_WAIT if timeout is None else timeout):
        try:
            return retry_lost_commits(
                workflow_id, "update", lambda _: _apply(rt, dispatcher, workflow_id, update)
            )
        except KeptLosing:
            raise WorkflowClaimUnavailableError(workflow_id, "a racing writer") from None


def _apply(rt: Runtime, dispatcher: Dispatcher, workflow_id: str, update: IncomingUpdate) -> Any:
    """One attempt at an update: answered before, or applied by a drive of the run here."""
    answered = rt.storage.get(keys.update_response_key(workflow_id, update.update_id))
    if answered is not None:
        return decode(UpdateResponse.from_bytes(answered).value)
    state = _state(rt, workflow_id)
    if state.status != RUNNING:
        raise WorkflowNotRunningError(workflow_id, state.status)
    if rt.fence.needs_claim(workflow_id):
        _reject_early(rt, workflow_id, update)
    request = DriveRequest(update=update)
    try:
        outcome = guarded_drive(
            rt, workflow_id, "update", request, dispatcher.enqueue, explicit=True
        )
    except EngineDeposedError:
        rt.fence.deposed(workflow_id)
        if update.applied:
            return _landed(workflow_id, update, "this engine lost its claim")
        raise WorkflowClaimUnavailableError(workflow_id, "another engine") from None
    except WeftError as exc:
        if not update.applied:
            raise
        return _landed(workflow_id, update, str(exc))
    if outcome == "collect":
        # the run left running since it was read: name where it is now
        raise WorkflowNotRunningError(workflow_id, _state(rt, workflow_id).status)
    if update.applied:
        return update.result
    raise WorkflowNotRunningError(workflow_id, outcome)


def _landed(workflow_id: str, update: IncomingUpdate, why: str) -> Any:
    """The result of an update whose commit landed before the rest of its drive failed.

    The update is applied and its response stored, so it is answered (a retry without an
    ``update_id`` would apply it twice); the run is driven on later by its wake-up.
    """
    logger.warning(
        "workflow %s: update %r applied, but the drive after it failed (a later pass drives "
        "it): %s",
        workflow_id,
        update.name,
        why,
    )
    return update.result


def _reject_early(rt: Runtime, workflow_id: str, update: IncomingUpdate) -> None:
    """Run the validator and handler on a read-only replay first, so an update that will be
    rejected never takes the claim (which is a write): a rejected request writes nothing.

    The replay stops where the stored history ends; if the handler is not registered there
    (the live drive may get further), the live drive decides.
    """
    replayed = replay(rt, workflow_id)
    ctx = None if replayed is None else replayed.ctx
    entry = None if ctx is None else ctx.update_handlers.get(update.name)
    if entry is None:
        return
    handler, validator = entry
    payload = decode(update.payload)
    if validator is not None:
        validate(validator, payload, update.name)
    try:
        handler(payload)
    except Exception as exc:
        raise UpdateFailedError(update.name, type(exc).__name__, str(exc)) from None


def run_query(rt: Runtime, workflow_id: str, name: str, arg: Any) -> Any:
    """Answer a query from the stored history, without running or writing anything."""
    check_text(name, "query name", None)
    encoded_arg = encode(arg, "query argument")
    replayed = replay(rt, workflow_id)
    if replayed is None:
        raise WorkflowNotFoundError(workflow_id)
    ctx = replayed.ctx
    handler = None if ctx is None else ctx.query_handlers.get(name)
    if handler is None:
        known = ", ".join(sorted(ctx.query_handlers)) if ctx else ""
        raise UnknownQueryError(
            f"workflow {workflow_id!r} has no query handler {name!r} (handlers: {known or 'none'})"
        )
    return decode(encode(handler(decode(encoded_arg)), f"result of query {name!r}"))


def complete_async(
    rt: Runtime,
    token: str,
    *,
    result: Any = None,
    error: BaseException | str | None = None,
    failed: bool = False,
) -> str:
    """Record an async activity's outcome (single use); returns the workflow id to wake."""
    parsed = decode_token(token)
    if parsed is None:
        raise ActivityTokenNotFoundError("this is not an activity completion token")
    workflow_id, slot, attempt = parsed
    if failed:
        error_type = type(error).__name__ if isinstance(error, BaseException) else "ActivityError"
        record: dict[str, Any] = {
            "ok": False,
            "type": error_type,
            "message": cut_message(str(error or "")),
        }
    else:
        record = {"ok": True, "v": rt.encode_payload(result, "async activity result")}
    pending_key = keys.pending_key(workflow_id, f"{slot}@{attempt}")
    result_key = keys.async_result_key(workflow_id, slot, attempt)
    for _ in range(3):
        pending = rt.storage.get(pending_key)
        if pending is None or rt.storage.get(result_key) is not None:
            raise ActivityTokenNotFoundError(
                "no activity is waiting on this token (unknown, or already completed)"
            )
        decode_record(pending, f"the pending activity of workflow {workflow_id!r}")
        now = rt.now()
        conditions = [Condition(pending_key, pending), Condition(result_key, None)]
        ops = [
            Put(result_key, encode({**record, "at": now})),
            timers.arm(rt.shards, timers.ASYNC_ACTIVITY, workflow_id, now, f"{slot}#{attempt}"),
        ]
        if write(rt, conditions, ops, check=False):
            return workflow_id
    raise ActivityTokenNotFoundError("the token was used by a racing completion")


def _state(rt: Runtime, workflow_id: str) -> WorkflowState:
    data = rt.storage.get(keys.state_key(workflow_id))
    if data is None:
        raise WorkflowNotFoundError(workflow_id)
    return WorkflowState.from_bytes(data)
