"""Steps made of other steps: ``all`` (every branch, each recorded at its own sub-slot) and
``race`` (the first branch to finish, recorded with its index)."""

from __future__ import annotations

from typing import Any

from weft_serverless.codec import encode
from weft_serverless.commands import All, Race
from weft_serverless.storage import keys

from ..commit import decode_value
from ..outcomes import Done, Outcome, error_to_record
from .scope import StepScope


def all_of(scope: StepScope, cmd: All, slot: str) -> Done | None:
    values: list[Any] = []
    parked = False
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        record = scope.history.ops.get(sub)
        if record is not None:
            outcome = scope.replay(branch, sub, record)
        else:
            done = scope.advance(branch, sub)
            if done is None:
                parked = True
                values.append(None)
                continue
            scope.commit_done(branch, sub, done)
            outcome = done.outcome
        if outcome.error is not None:
            err = error_to_record(outcome.error)
            return scope.finish(slot, Outcome(error=outcome.error), {"ok": False, "err": err})
        values.append(outcome.value)
    if parked:
        return None
    return scope.finish(slot, Outcome(values), {"n": len(values)})


def race(scope: StepScope, cmd: Race, slot: str) -> Done | None:
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        done = scope.advance(branch, sub)
        if done is None:
            continue
        if done.outcome.error is not None:
            record = {"ok": False, "i": index, "err": error_to_record(done.outcome.error)}
        else:
            record = {"i": index, "v": encode(done.outcome.value)}
        outcome = (
            done.outcome if done.outcome.error is not None else Outcome((index, done.outcome.value))
        )
        return scope.finish(
            slot,
            outcome,
            record,
            conditions=done.conditions,
            ops=done.ops,
            after_commit=done.after_commit,
            cleanup=done.cleanup,
        )
    return None


def replay_all(scope: StepScope, cmd: All, slot: str, record: dict[str, Any]) -> Outcome:
    """Each branch's value from its own sub-slot record."""
    values = []
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        values.append(scope.replay(branch, sub, scope.history.ops[sub]).value)
    return Outcome(values)


def replay_race(scope: StepScope, cmd: Race, slot: str, record: dict[str, Any]) -> Outcome:
    return Outcome((record["i"], decode_value(record)))
