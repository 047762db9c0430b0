"""Carrying out one durable command at a slot, or answering it from the stored history.

``advance`` returns ``Done`` (the outcome plus the writes that must commit with its op record)
or ``None`` when the command cannot finish yet; anything needed to wake it later (a pending
record and its timer) is committed before returning ``None``. Which handler carries a
command is one table, keyed by the command's type: a new kind of step is one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from weft_serverless.commands import (
    All,
    Command,
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

from ..commit import decode_value
from ..outcomes import Done, Outcome, error_from_record
from ..stored_records import OpRecord
from . import activities, children, compose, recorded, upserts, waits
from .scope import StepScope

T = TypeVar("T")
Handler = Callable[[StepScope, Any, str], Done | None]
Replayer = Callable[[StepScope, Any, str, OpRecord], Outcome]

HANDLERS: dict[type[Command[Any]], Handler] = {
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
        if handler is None:
            raise TypeError(f"unknown command {cmd!r}")
        return handler(self, cmd, slot)


def lookup(table: dict[type[Command[Any]], T], cmd: Command[Any]) -> T | None:
    """The entry for the command's type, or for the nearest base a subclass extends."""
    found = table.get(type(cmd))
    if found is None:
        for base in type(cmd).__mro__[1:]:
            if base in table:
                return table[base]
    return found
