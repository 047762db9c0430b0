"""Steps made of other steps: ``all`` and ``map`` (every branch, each recorded at its own
sub-slot) and ``race`` (the first branch to finish, recorded with its index)."""

from __future__ import annotations

from typing import Any

from weft_serverless.codec import encode
from weft_serverless.commands import All, Race, Run, Sleep
from weft_serverless.storage import keys

from ..commit import decode_value
from ..outcomes import Done, Outcome, error_to_record
from .scope import StepScope
from .together import Branch, run_together


def all_of(scope: StepScope, cmd: All, slot: str) -> Done | None:
    """Every branch: waits, sleeps and children advance as before, activity branches run
    together (``together``); each branch is recorded at its own sub-slot as it finishes."""
    outcomes: dict[int, Outcome] = {}
    failed: list[BaseException] = []
    together: list[Branch] = []
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        record = scope.history.ops.get(sub)
        if record is not None:
            outcomes[index] = scope.replay(branch, sub, record)
        elif isinstance(branch, Run) and not scope.rt.inline_activities:
            together.append(Branch(index, branch, sub))
            continue
        else:
            done = scope.advance(branch, sub)
            if done is None:
                continue
            scope.commit_done(branch, sub, done)
            outcomes[index] = done.outcome
        error = outcomes[index].error
        if error is not None:
            return _failed(scope, slot, error)

    def decide(index: int, done: Done) -> bool:
        branch = cmd.commands[index]
        scope.commit_done(branch, keys.branch_slot(slot, index), done)
        outcomes[index] = done.outcome
        if done.outcome.error is not None:
            failed.append(done.outcome.error)
            return True  # the all fails: its other branches are given up
        return False

    if together:
        run_together(scope, together, _limit(scope, cmd), decide)
    if failed:
        return _failed(scope, slot, failed[0])
    if len(outcomes) < len(cmd.commands):
        return None
    values = [outcomes[index].value for index in range(len(cmd.commands))]
    return scope.finish(slot, Outcome(values), {"n": len(values)})


def _failed(scope: StepScope, slot: str, error: BaseException) -> Done:
    err = error_to_record(error)
    return scope.finish(slot, Outcome(error=error), {"ok": False, "err": err})


def _limit(scope: StepScope, cmd: All) -> int:
    """Attempts of this step running at once: its ``max_concurrency``, within the engine's
    bound (the engine's threads enforce that bound across all steps too)."""
    bound = scope.rt.parallel_activities
    return bound if cmd.max_concurrency is None else min(cmd.max_concurrency, bound)


def race(scope: StepScope, cmd: Race, slot: str) -> Done | None:
    """The first branch to finish wins. Branches that can finish without running anything
    (a signal already there, a due sleep, a recorded value) are looked at first, in order;
    then activity branches run together, and the first to end (result or final failure)
    wins: the others are given up, their results discarded. A sleep falling due while they
    run wins too."""
    together: list[Branch] = []
    sleeping: list[tuple[int, str, float]] = []
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        if isinstance(branch, Run) and not scope.rt.inline_activities:
            together.append(Branch(index, branch, sub))
            continue
        done = scope.advance(branch, sub)
        if done is not None:
            return _won(scope, slot, index, done)
        due = (scope.history.pending.get(sub) or {}).get("due")
        if isinstance(branch, Sleep) and due is not None:
            sleeping.append((index, sub, float(due)))
    if not together:
        return None
    won: list[tuple[int, Done]] = []

    def decide(index: int, done: Done) -> bool:
        won.append((index, done))
        return True

    def woken() -> bool:
        now = scope.rt.now()
        return any(keys.is_due(now, due) for _, _, due in sleeping)

    run_together(scope, together, len(together), decide, woken if sleeping else None)
    if won:
        return _won(scope, slot, *won[0])
    for index, sub, due in sleeping:
        if keys.is_due(scope.rt.now(), due):
            done = scope.advance(cmd.commands[index], sub)
            if done is not None:
                return _won(scope, slot, index, done)
    return None


def _won(scope: StepScope, slot: str, index: int, done: Done) -> Done:
    if done.outcome.error is not None:
        record = {"ok": False, "i": index, "err": error_to_record(done.outcome.error)}
        outcome = done.outcome
    else:
        record = {"i": index, "v": encode(done.outcome.value)}
        outcome = Outcome((index, done.outcome.value))
    return scope.finish(
        slot,
        outcome,
        record,
        conditions=done.conditions,
        ops=done.ops,
        after_commit=done.after_commit,
        cleanup=done.cleanup,
    )


def replay_all(scope: StepScope, cmd: All, slot: str, record: dict[str, Any]) -> Outcome:
    """Each branch's value from its own sub-slot record."""
    values = []
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        values.append(scope.replay(branch, sub, scope.history.ops[sub]).value)
    return Outcome(values)


def replay_race(scope: StepScope, cmd: Race, slot: str, record: dict[str, Any]) -> Outcome:
    return Outcome((record["i"], decode_value(record)))
