"""Which handler carries a command is one table: every step-taking command is in it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from weft_serverless import commands
from weft_serverless.engine.steps.runner import HANDLERS, lookup


def test_every_command_that_takes_a_step_slot_has_a_handler() -> None:
    defined = {
        cls
        for _, cls in inspect.getmembers(commands, inspect.isclass)
        if issubclass(cls, commands.Command) and cls is not commands.Command
    }
    # get_version and continue_as_new take no step slot: the drive answers the one and ends
    # the run on the other without advancing a step.
    assert set(HANDLERS) == defined - {commands.GetVersion, commands.ContinueAsNew}


def test_a_command_subclass_is_carried_by_its_base_handler() -> None:
    @dataclass(frozen=True, slots=True, eq=False)
    class LongSleep(commands.Sleep):
        pass

    assert lookup(HANDLERS, LongSleep(5.0)) is HANDLERS[commands.Sleep]
    assert lookup(HANDLERS, commands.GetVersion("c", 1, 1)) is None
