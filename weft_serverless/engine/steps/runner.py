"""Carrying out one durable command at a slot, or answering it from the stored history.

``advance`` returns ``Done`` (the outcome plus the writes that must commit with its op record)
or ``None`` when the command cannot finish yet; anything needed to wake it later (a pending
record and its timer) is committed before returning ``None``. Which handler carries a
command is one table, keyed by the command's type: a new kind of step is one entry. The
commands that take no step slot are in it too, as ``AtYield`` entries (see ``slotless``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from weft_serverless.commands import (
    All,
    Command,
    ContinueAsNew,
    GetVersion,
    Map,
    Race,
    Record,
    Run,
    Sleep,
    StartChild,
    UpsertSearchAttributes,
    WaitForSignal,
    WaitUntil,
)
from weft_serverless.engine.persistence.outcomes import Done, Outcome, error_from_record
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.runs.commit import decode_value
from weft_serverless.engine.steps import (
    activities,
    children,
    compose,
    recorded,
    slotless,
    upserts,
    waits,
)
from weft_serverless.engine.steps.scope import StepScope

T = TypeVar("T")
Handler = Callable[[StepScope, Any, str], Done | None]
Replayer = Callable[[StepScope, Any, str, OpRecord], Outcome]
Answer = Callable[[StepScope, Any], Outcome | None]


@dataclass(frozen=True, slots=True)
class AtYield:
    """A command answered where it is yielded: it takes no step slot and leaves no op
    record. ``carry_out`` answers it in a drive, ``recall`` from the stored history alone;
    ``None`` from either: the run's code goes no further here."""

    carry_out: Answer
    recall: Answer


HANDLERS: dict[type[Command[Any]], Handler | AtYield] = {
    Run: activities.run,
    Sleep: waits.sleep,
    WaitForSignal: waits.wait_for_signal,
    WaitUntil: waits.wait_until,
    All: compose.all_of,
    Map: compose.all_of,
    Race: compose.race,
    StartChild: children.start_child,
    Record: recorded.record,
    UpsertSearchAttributes: upserts.upsert,
    GetVersion: AtYield(slotless.get_version, slotless.recall_version),
    ContinueAsNew: AtYield(slotless.continue_as_new, slotless.recall_continue),
}

# Commands whose recorded value is not simply the stored ``v``.
REPLAYERS: dict[type[Command[Any]], Replayer] = {
    All: compose.replay_all,
    Map: compose.replay_all,
    Race: compose.replay_race,
}


class StepRunner(StepScope):
    """Advances commands of one workflow drive against its loaded history."""

    def replay(self, cmd: Command[Any], slot: str, record: OpRecord) -> Outcome:
        self.check_signature(cmd, slot, record)
        if not record.ok:
            return Outcome(error=error_from_record(record.error or {}))
        replayer = lookup(REPLAYERS, cmd)
        if replayer is not None:
            return replayer(self, cmd, slot, record)
        return Outcome(decode_value(record))

    def advance(self, cmd: Command[Any], slot: str) -> Done | None:
        self.begin(cmd, slot)
        handler = HANDLERS.get(type(cmd)) or lookup(HANDLERS, cmd)
        if handler is None or isinstance(handler, AtYield):
            raise TypeError(f"unknown command {cmd!r}")
        return handler(self, cmd, slot)

    @staticmethod
    def carries_out(cmd: Command[Any]) -> bool:
        """Whether the step table has an entry for the command: a ``Command`` subclass of
        the user's own is data the engine cannot carry out."""
        return (HANDLERS.get(type(cmd)) or lookup(HANDLERS, cmd)) is not None

    def at_yield(self, cmd: Command[Any]) -> AtYield | None:
        """How the command is answered where it is yielded; None: it takes a step slot."""
        entry = HANDLERS.get(type(cmd)) or lookup(HANDLERS, cmd)
        return entry if isinstance(entry, AtYield) else None


def lookup(table: dict[type[Command[Any]], T], cmd: Command[Any]) -> T | None:
    """The entry for the command's type, or for the nearest base a subclass extends."""
    found = table.get(type(cmd))
    if found is None:
        for base in type(cmd).__mro__[1:]:
            if base in table:
                return table[base]
    return found
