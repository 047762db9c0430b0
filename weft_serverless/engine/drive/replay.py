"""Replaying a run's stored history and nothing else: the path queries, update pre-checks
and the operator's replay view read a run's code through.

The workflow's code runs from the top, and each command it yields is answered from its op
record (or, for a command that takes no slot, from the stored history alone) until the
first command with no record, or the end of its code. Nothing runs but the workflow's own
code and nothing is written: no fence, commit, timer or parked generator is reached.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.commands import Command
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.persistence.outcomes import Outcome
from weft_serverless.engine.persistence.records import History, load_history
from weft_serverless.engine.process.telemetry import run_fields
from weft_serverless.engine.runs import updates
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.engine.steps.runner import StepRunner
from weft_serverless.errors import NondeterminismError
from weft_serverless.workflow import WorkflowDefinition


@dataclass(slots=True)
class Replayed:
    """A run's code replayed to the end of its stored history: its context (the handlers
    it registered and the state they read) and the command it yielded at each step slot,
    in order, the first one without a record included. ``ctx`` is None when this engine
    does not register the run's type."""

    history: History
    ctx: WorkflowContext | None = None
    seen: dict[str, Command[Any]] = field(default_factory=dict)


def replay(rt: Runtime, workflow_id: str) -> Replayed | None:
    """Read the run and replay its code as far as its stored history goes; None when the
    run does not exist."""
    with run_fields(workflow_id) as fields:
        history = load_history(rt.storage, workflow_id)
        if history is None:
            rt.parked.discard(workflow_id)  # a generator kept for a run now gone is stale
            return None
        fields.workflow_type = history.state.type
        definition = registered(rt, history)
        if definition is None:
            return Replayed(history)
        ctx = WorkflowContext(workflow_id, definition, rt.now, rt.encode_payload)
        replayed = Replayed(history, ctx)
        _Replay(rt, replayed, ctx, definition).run()
        return replayed


def registered(rt: Runtime, history: History) -> WorkflowDefinition | None:
    """The run's workflow definition, or None (logged) when this engine does not register
    its type: the run is left as it is, its timers kept for an engine that does."""
    definition = rt.definitions.get(history.state.type)
    if definition is None:
        # An engine with no workflows at all (an operator tool) only stores writes: routine,
        # so a debug line (an operator's `weft signal` prints nothing it did not ask for).
        logger.log(
            logging.WARNING if rt.definitions else logging.DEBUG,
            "workflow %s has type %r, which this engine does not register; left as it is",
            history.state.id,
            history.state.type,
        )
    return definition


class _Replay:
    """One replay of a run's code against its stored history."""

    def __init__(
        self,
        rt: Runtime,
        replayed: Replayed,
        ctx: WorkflowContext,
        definition: WorkflowDefinition,
    ) -> None:
        history = replayed.history
        self.history, self.ctx, self.seen = history, ctx, replayed.seen
        self.runner = StepRunner(rt, history.state.id, definition, history, _no_wake)

    def run(self) -> None:
        """Answer each command the code yields from the history, until the code ends or a
        command has no record; a mismatch with the history ends the replay where found."""
        try:
            gen = self.runner.definition.fn(self.ctx, decode(self.history.state.input))
        except Exception:
            return
        outcome: Outcome | None = Outcome()
        while outcome is not None:
            slot = self.runner.next_slot()
            self.ctx.is_replaying = slot in self.history.ops
            cmd = self._resume(gen, outcome)
            outcome = None if cmd is None else self._answer(cmd, slot)

    def _resume(self, gen: Any, outcome: Outcome) -> Command[Any] | None:
        """Hand the code its last outcome: the next command it yields, or None (ended)."""
        try:
            cmd = gen.send(outcome.value) if outcome.error is None else gen.throw(outcome.error)
        except Exception:  # StopIteration included: the code returned or raised
            return None
        if not isinstance(cmd, Command):
            gen.close()
            return None
        self.ctx.mark_yielded(cmd)
        return cmd

    def _answer(self, cmd: Command[Any], slot: str) -> Outcome | None:
        """The command's recorded outcome; None where the stored history ends."""
        at_yield = self.runner.at_yield(cmd)
        if at_yield is not None:
            return at_yield.recall(self.runner, cmd)
        self.runner.step += 1
        self.seen[slot] = cmd
        try:
            if self.history.updates_applied:
                updates.replay_applied(self.ctx, self.history, slot)
            record = self.history.ops.get(slot)
            return None if record is None else self.runner.replay(cmd, slot, record)
        except NondeterminismError:
            return None


def _no_wake(workflow_id: str) -> None:
    """A replay wakes no run: nothing it does is new."""
