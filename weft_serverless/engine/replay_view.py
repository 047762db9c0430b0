"""A run as its own code sees it: what it waits for now, and what each step was given.

The store keeps what a step returned (its op record's value, a received signal's payload)
but neither what the code handed it (an activity's input) nor what a parked run waits for
(a signal wait with no timeout leaves no record; update and query handlers live in the
code). Both are known again by replaying the recorded history read-only, as a query does:
nothing runs but the workflow's own code, nothing is written, and a run whose type this
engine does not register is only read. Operators use it to act on what a run really waits
for (the console warns on a signal name the run does not wait for, since a typo waits for
ever) and to read each step's input beside its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from weft_serverless.codec import decode
from weft_serverless.commands import All, Command, Race, Run, StartChild, WaitForSignal
from weft_serverless.engine.drive.replay import replay
from weft_serverless.engine.persistence.records import RUNNING, SUSPENDED, History, load_history
from weft_serverless.errors import WorkflowNotFoundError
from weft_serverless.storage import keys

if TYPE_CHECKING:
    from weft_serverless.engine.engine import Engine
    from weft_serverless.engine.runtime import Runtime

PARKED = (RUNNING, SUSPENDED)
"""Statuses at which a run stands parked in its code (a pending run has not started yet)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """What a parked run waits for from outside: the signals its parked step waits on (the
    unfinished branches of an ``all``/``race`` included), and the updates and queries its
    handlers answer there."""

    signals: tuple[str, ...]
    updates: tuple[str, ...]
    queries: tuple[str, ...]

    def as_json(self) -> dict[str, list[str]]:
        return {
            "signals": list(self.signals),
            "updates": list(self.updates),
            "queries": list(self.queries),
        }


@dataclass(frozen=True, slots=True)
class ReplayView:
    """Each step's input and output by slot (a slot is present when the value is known),
    the signals buffered for the run with their payloads, oldest first, and what it waits
    for. ``replayed`` says whether the code was replayed: without it (a type this engine
    does not register) there are outputs only, and ``waiting`` is None."""

    status: str
    replayed: bool
    inputs: Mapping[str, Any] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    buffered: tuple[tuple[str, Any], ...] = ()
    waiting: Waiting | None = None
    queries: tuple[str, ...] = ()  # the query handlers its code registered, at any status


def replay_view(engine: Engine, workflow_id: str) -> ReplayView:
    """The run's steps' values and what it waits for (one range read, then a read-only
    replay when this engine registers the run's type). Raises ``WorkflowNotFoundError``."""
    rt = engine.runtime
    history = load_history(rt.storage, workflow_id)
    if history is None:
        raise WorkflowNotFoundError(workflow_id)
    outputs = {
        slot: decode(record.value)
        for slot, record in history.ops.items()
        if record.value is not None
    }
    buffered = sorted(
        (sort, name, None if signal.value is None else decode(signal.value))
        for name, queue in history.signals.items()
        for sort, _, signal in queue
    )
    status = history.state.status
    base = ReplayView(status, False, {}, outputs, tuple((n, v) for _, n, v in buffered))
    replay = _replay(rt, history)
    if replay is None:
        return base
    seen, waiting, queries = replay
    inputs: dict[str, Any] = {}
    for slot, cmd in seen.items():
        _note_inputs(cmd, slot, inputs)
    return ReplayView(status, True, inputs, outputs, base.buffered, waiting, queries)


def waiting_for(engine: Engine, workflow_id: str) -> Waiting | None:
    """What the run waits for now; None when it is not parked (pending or finished) or
    this engine does not register its type. Raises ``WorkflowNotFoundError``."""
    rt = engine.runtime
    history = load_history(rt.storage, workflow_id)
    if history is None:
        raise WorkflowNotFoundError(workflow_id)
    replay = _replay(rt, history)
    return None if replay is None else replay[1]


def _replay(
    rt: Runtime, history: History
) -> tuple[dict[str, Command[Any]], Waiting | None, tuple[str, ...]] | None:
    """Replay the run's code read-only: the command yielded at each step, what the run
    waits for at the step it is parked on, and its query handlers; None for a type this
    engine does not register."""
    if history.state.type not in rt.definitions:
        return None
    replayed = replay(rt, history.state.id)
    if replayed is None or replayed.ctx is None:
        return None
    seen, ctx = replayed.seen, replayed.ctx
    queries = tuple(sorted(ctx.query_handlers))
    if history.state.status not in PARKED:
        return seen, None, queries
    signals: list[str] = []
    for slot, cmd in seen.items():
        if slot not in history.ops:  # the step it is parked on
            signals += _awaited(cmd, slot, history)
    updates = tuple(sorted(ctx.update_handlers))
    return seen, Waiting(tuple(dict.fromkeys(signals)), updates, queries), queries


def _awaited(cmd: Command[Any], slot: str, history: History) -> list[str]:
    """The signals a parked command still waits for: its own, or its unfinished branches'."""
    if isinstance(cmd, WaitForSignal):
        return [cmd.name]
    if isinstance(cmd, All | Race):
        names: list[str] = []
        for index, branch in enumerate(cmd.commands):
            sub = keys.branch_slot(slot, index)
            if sub not in history.ops:
                names += _awaited(branch, sub, history)
        return names
    return []


def _note_inputs(cmd: Command[Any], slot: str, inputs: dict[str, Any]) -> None:
    """What the code handed a step (an activity's or a child's input), branches included."""
    if isinstance(cmd, Run | StartChild):
        inputs[slot] = cmd.input
    elif isinstance(cmd, All | Race):
        for index, branch in enumerate(cmd.commands):
            _note_inputs(branch, keys.branch_slot(slot, index), inputs)
