"""Which handler carries a command is one table: every command is in it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from weft_serverless import commands
from weft_serverless.engine.steps.runner import HANDLERS, AtYield, lookup


def test_every_command_has_an_entry_in_the_table() -> None:
    defined = {
        cls
        for _, cls in inspect.getmembers(commands, inspect.isclass)
        if issubclass(cls, commands.Command) and cls is not commands.Command
    }
    assert set(HANDLERS) == defined
    # get_version and continue_as_new take no step slot: they are answered where they are
    # yielded (the one pinned, the other ending the run), never advanced at a slot.
    at_yield = {cls for cls, entry in HANDLERS.items() if isinstance(entry, AtYield)}
    assert at_yield == {commands.GetVersion, commands.ContinueAsNew}


def test_a_command_subclass_is_carried_by_its_base_handler() -> None:
    @dataclass(frozen=True, slots=True, eq=False)
    class LongSleep(commands.Sleep):
        pass

    @dataclass(frozen=True, slots=True, eq=False)
    class Pinned(commands.GetVersion):
        pass

    assert lookup(HANDLERS, LongSleep(5.0)) is HANDLERS[commands.Sleep]
    assert lookup(HANDLERS, Pinned("c", 1, 1)) is HANDLERS[commands.GetVersion]
