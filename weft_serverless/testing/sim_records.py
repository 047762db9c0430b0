"""What a simulation is made of and what it leaves behind, as plain data.

A ``Scenario`` is JSON-able: replaying it replays the run. ``JournalEntry`` (every write, by
engine and the action it was carrying out, with its conditions and whether it landed),
``Execution`` (every activity run) and ``Beat`` (what a heartbeating attempt was handed) are
what the world records for the invariants to check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weft_serverless.storage.base import Condition, Op


@dataclass
class Scenario:
    """Everything a run depends on besides the code: replaying it replays the run."""

    seed: int
    backend: str = "memory"
    engines: int = 3
    ownership: str = "workflow-lease"
    actions: list[list[Any]] = field(default_factory=list)
    faults: list[list[Any]] = field(default_factory=list)
    workers: int = 1  # maintenance workers sharing the shards (``maintain-share``)
    hint_horizon: float = 0.0  # each engine's timer hint port's horizon; 0: no port


@dataclass(frozen=True)
class Execution:
    """One run of an activity: by which engine slot, and when."""

    slot: int
    slot_faults: int  # the slot's fault count when the activity ran
    drive_start: int  # tick at which the drive running it read the run's history
    tick: int  # tick at which it ran
    drive_faults: int = 0  # the slot's fault count when that drive read the history


@dataclass(frozen=True)
class Beat:
    """One attempt of a heartbeating activity: the details it was handed (its previous
    attempts' progress), and how many faults had fired anywhere when it started."""

    attempt: int
    seen: Any
    faults: int
    tick: int


@dataclass(frozen=True)
class JournalEntry:
    """One storage write, by which engine, in which action, and whether it landed."""

    engine: str
    conditions: tuple[Condition, ...]
    ops: tuple[Op, ...]
    committed: bool
    action: str = ""
    tick: int = 0  # when it landed, on the world's clock of ticks (``World.clock_tick``)
    clock: float | None = None  # the writing engine's clock when it landed
