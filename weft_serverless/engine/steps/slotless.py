"""Commands answered where they are yielded, taking no step slot: ``get_version`` and
``continue_as_new`` (see ``commands.GetVersion`` and ``commands.ContinueAsNew``).

Each has two answers: ``carry_out`` in a drive (it may write a record of its own, or end
the run) and ``recall`` from the stored history alone, for the replay-only path. A ``None``
answer means the run's code goes no further here (it continued as new, or the history ends).
"""

from __future__ import annotations

from weft_serverless.codec import encode
from weft_serverless.commands import ContinueAsNew, GetVersion
from weft_serverless.engine.persistence.outcomes import Outcome
from weft_serverless.engine.runs import continuation
from weft_serverless.engine.runs.commit import commit
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.errors import (
    CodecError,
    InvalidArgumentError,
    PayloadTooLargeError,
    StorageLimitError,
    VersionMismatchError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put


def get_version(scope: StepScope, cmd: GetVersion) -> Outcome:
    """Pin ``max_supported`` durably the first time a run reaches this change."""
    pinned = scope.history.versions.get(cmd.change_id)
    if pinned is None:
        if _passed_before(scope):
            return Outcome(cmd.min_supported)
        pinned = cmd.max_supported
        key = keys.version_key(scope.workflow_id, cmd.change_id)
        ops: list[Op] = [Put(key, encode({"v": pinned}))]
        commit(scope.rt, scope.workflow_id, [Condition(key, None)], ops)
        scope.history.note(ops)
        scope.history.versions[cmd.change_id] = pinned
    return _within(scope, cmd, pinned)


def recall_version(scope: StepScope, cmd: GetVersion) -> Outcome:
    """The version the run takes here, pinning nothing: an unpinned change not passed
    before gets ``max_supported``, as a drive would pin it."""
    pinned = scope.history.versions.get(cmd.change_id)
    if pinned is None:
        return Outcome(cmd.min_supported if _passed_before(scope) else cmd.max_supported)
    return _within(scope, cmd, pinned)


def _passed_before(scope: StepScope) -> bool:
    """A run that had already passed this point before the change was deployed reaches it
    again while re-running code that ran before this drive, i.e. at or before the step it
    was parked on: it gets ``min_supported``."""
    return 0 < scope.step <= scope.loaded


def _within(scope: StepScope, cmd: GetVersion, pinned: int) -> Outcome:
    if not cmd.min_supported <= pinned <= cmd.max_supported:
        return Outcome(
            error=VersionMismatchError(
                scope.workflow_id,
                f"{cmd.change_id}={pinned}",
                f"{cmd.change_id} in [{cmd.min_supported}, {cmd.max_supported}]",
            )
        )
    return Outcome(pinned)


def continue_as_new(scope: StepScope, cmd: ContinueAsNew) -> Outcome | None:
    """End this run and start the next one (engine/runs/continuation.py): ``None``, and the
    drive sees to the next run. A refusal is raised at the yield, nothing written."""
    try:
        new_input = scope.rt.encode_payload(cmd.input, "continue_as_new input")
        continuation.continue_as_new(
            scope.rt, scope.history, scope.definition, new_input, scope.step
        )
    except (CodecError, PayloadTooLargeError, StorageLimitError, InvalidArgumentError) as exc:
        return Outcome(error=exc)
    return None


def recall_continue(scope: StepScope, cmd: ContinueAsNew) -> None:
    """The stored history of this run ends here."""
    return None
