"""One engine process of the simulated world, and the activity context it shares.

A ``Slot`` is a process: a crash ends an incarnation (its storage handle refuses everything
after), and the slot's next use starts a new one, which recovers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from weft_serverless.activity import ActivityContext, current_activity, set_current
from weft_serverless.engine.engine import Engine
from weft_serverless.errors import WeftError
from weft_serverless.testing.sim_executor import SimThreads
from weft_serverless.testing.sim_faults import FaultyStorage


@contextmanager
def own_activity_context() -> Iterator[None]:
    """Keep the interrupted activity's context (engines acting in its middle reset it)."""
    saved: ActivityContext | None
    try:
        saved = current_activity()
    except WeftError:
        saved = None
    try:
        yield
    finally:
        set_current(saved)


@dataclass
class Slot:
    """One engine process; a crash ends an incarnation and the next use starts a new one."""

    index: int
    incarnation: int = 0
    engine: Engine | None = None
    storage: FaultyStorage | None = None
    threads: SimThreads | None = None
    faults: int = 0  # faults that hit this slot so far (any kind)

    @property
    def engine_id(self) -> str:
        return f"e{self.index}.{self.incarnation}"
