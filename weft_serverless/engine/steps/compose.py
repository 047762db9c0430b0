"""Steps made of other steps: ``all`` and ``map`` (every branch, each recorded at its own
sub-slot) and ``race`` (the first branch to finish, recorded with its index). A composite
and the composites nested in it are carried out as one fan-out (``fan_out``)."""

from __future__ import annotations

from weft_serverless.commands import All, Race
from weft_serverless.engine.persistence.outcomes import Done, Outcome
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.runs.commit import decode_value
from weft_serverless.engine.steps.fan_out import Tree
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.storage import keys


def all_of(scope: StepScope, cmd: All, slot: str) -> Done | None:
    """Every branch: waits, sleeps and children advance as before, activity branches (nested
    ones included) run together; each branch is recorded at its own sub-slot as it finishes."""
    return Tree(scope).carry_out(cmd, slot)


def race(scope: StepScope, cmd: Race, slot: str) -> Done | None:
    """The first branch to finish wins. Branches that can finish without running anything
    (a signal already there, a due sleep, a recorded value) are looked at first, in order;
    then activity branches run together, and the first to end (result or final failure)
    wins: the others are given up, their results discarded. A sleep falling due while they
    run wins too."""
    return Tree(scope).carry_out(cmd, slot)


def replay_all(scope: StepScope, cmd: All, slot: str, record: OpRecord) -> Outcome:
    """Each branch's value from its own sub-slot record."""
    values = []
    for index, branch in enumerate(cmd.commands):
        sub = keys.branch_slot(slot, index)
        values.append(scope.replay(branch, sub, scope.history.ops[sub]).value)
    return Outcome(values)


def replay_race(scope: StepScope, cmd: Race, slot: str, record: OpRecord) -> Outcome:
    return Outcome((record.index, decode_value(record)))
