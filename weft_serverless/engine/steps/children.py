"""The ``start_child`` step: start another workflow in the batch that records the step (a
detached child: its id is the result) or park until it ends (an awaited child)."""

from __future__ import annotations

from weft_serverless.codec import encode
from weft_serverless.commands import StartChild
from weft_serverless.engine.ownership import Fragment
from weft_serverless.engine.persistence import wakeups
from weft_serverless.engine.persistence.outcomes import (
    Done,
    Outcome,
    RaiseAtYield,
    error_from_record,
)
from weft_serverless.engine.persistence.records import error_record
from weft_serverless.engine.persistence.stored_records import OpRecord, PendingRecord
from weft_serverless.engine.runs import starting
from weft_serverless.engine.runs.commit import LostCommit, decode_value
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.errors import (
    CodecError,
    InvalidArgumentError,
    PayloadTooLargeError,
    WeftError,
    WorkflowAlreadyExistsError,
)
from weft_serverless.identifiers import check_workflow_id


def start_child(scope: StepScope, cmd: StartChild, slot: str) -> Done | None:
    workflow_id, history = scope.workflow_id, scope.history
    result = history.children.get(slot)
    if result is not None:
        if result["status"] == "completed":
            record = OpRecord.holding(result.get("v"))
            return Done(Outcome(decode_value(record)), record)
        err = error_record(
            "child",
            result.get("type", ""),
            result.get("message", ""),
            child_id=result["child_id"],
            status=result["status"],
        )
        return Done(Outcome(error=error_from_record(err)), OpRecord(ok=False, error=err))
    if slot in history.pending:
        return None
    try:
        encoded_input = scope.rt.encode_payload(cmd.input, f"input of child {cmd.workflow_type!r}")
    except (CodecError, PayloadTooLargeError) as exc:
        raise RaiseAtYield(exc) from None
    try:  # a derived id grows with each generation, so it can pass the limit
        child_id = check_workflow_id(cmd.id or f"{workflow_id}/{slot}", "child id")
    except InvalidArgumentError as exc:
        raise RaiseAtYield(exc) from None

    def start(epoch: bytes | None) -> Fragment | WeftError:
        return starting.child_start_fragment(
            scope.rt,
            workflow_id,
            slot,
            cmd.workflow_type,
            child_id,
            encoded_input,
            cmd.parent_close_policy,
            cmd.signature(),
            epoch,
            search_attributes=cmd.search_attributes,
            tags=cmd.tags,
        )

    try:
        if cmd.parent_close_policy != "await":
            # The step's result is the child id: start and record it in one batch. A
            # refused batch only makes the drive re-read, so what holds the id is read
            # first (an awaited start reads it only when refused).
            return _started(scope, cmd, slot, child_id, start(_epoch(scope, slot, child_id)))
        fragment = start(None)
        if isinstance(fragment, WeftError):
            return _not_started(child_id, fragment)
        fragment.ops += wakeups.disarm(history)
        if not starting.commit_child_start(scope.rt, workflow_id, child_id, fragment):
            # Refused: the id is held (raises), or a purged run of it left an epoch to
            # claim on top of; anything else is a racing writer, so re-read.
            epoch = _epoch(scope, slot, child_id)
            retry = start(epoch) if epoch is not None else None
            if isinstance(retry, Fragment):
                retry.ops += wakeups.disarm(history)
            if not isinstance(retry, Fragment) or not starting.commit_child_start(
                scope.rt, workflow_id, child_id, retry
            ):
                raise LostCommit(workflow_id)
    except WorkflowAlreadyExistsError as exc:
        return _not_started(child_id, exc)
    wakeups.disarmed(history)
    history.pending[slot] = PendingRecord(child_id=child_id, policy="await")
    scope.enqueue(child_id)
    return None


def _epoch(scope: StepScope, slot: str, child_id: str) -> bytes | None:
    return starting.child_start_epoch(scope.rt, scope.workflow_id, slot, child_id)


def _started(
    scope: StepScope, cmd: StartChild, slot: str, child_id: str, fragment: Fragment | WeftError
) -> Done:
    """The step of a non-awaited child: its id, committed with the child's start."""
    if isinstance(fragment, WeftError):
        return _not_started(child_id, fragment)
    return Done(
        Outcome(child_id),
        OpRecord.holding(encode(child_id)),
        conditions=fragment.conditions,
        ops=fragment.ops,
        after_commit=[
            lambda: scope.rt.fence.claim_landed(child_id),
            lambda: scope.rt.parked.discard(child_id),
            lambda: scope.history.pending.__setitem__(
                slot, PendingRecord(child_id=child_id, policy=cmd.parent_close_policy)
            ),
            lambda: scope.enqueue(child_id),
        ],
    )


def _not_started(child_id: str, error: WeftError) -> Done:
    err = error_record("child", error.code, str(error), child_id=child_id, status="not-started")
    return Done(Outcome(error=error_from_record(err)), OpRecord(ok=False, error=err))
