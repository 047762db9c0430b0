"""Parked generators kept warm, so waking a run does not replay its whole history.

Rebuilding a parked run from storage re-runs the workflow from the top and re-applies every
update recorded at its park point, so the N-th update at one park point would cost N
handler calls. An engine instead keeps the generator of a run it parked, with the
fingerprint of the stored records it was built from (``History.replay_fingerprint``). The
next drive on this engine reuses it only if its one range read gives exactly those records;
anything else (another engine's write, a takeover, a reset, a purge) falls back to replay.
A drive takes the entry out for its whole duration and puts one back only when it parks
normally, so an error, a lost commit or a deposed owner leaves nothing half-changed behind.
See docs/decisions/0013-update-cost.md.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from weft_serverless.commands import Command
from weft_serverless.context import WorkflowContext
from weft_serverless.workflow import WorkflowDefinition

DEFAULT_CAPACITY = 64

logger = logging.getLogger("weft_serverless.engine")


@dataclass(slots=True)
class ParkedRun:
    """A generator suspended at the command it parked on (top-level step ``step - 1``)."""

    gen: Any
    ctx: WorkflowContext
    cmd: Command[Any]
    step: int
    definition: WorkflowDefinition
    fingerprint: tuple[Any, ...]


class ParkedRuns:
    """A small per-engine LRU of parked runs; evicted generators are closed."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, ParkedRun] = OrderedDict()

    def take(self, workflow_id: str) -> ParkedRun | None:
        """Remove and return the run kept for ``workflow_id``; the caller now owns it."""
        with self._lock:
            return self._runs.pop(workflow_id, None)

    def discard(self, workflow_id: str) -> None:
        """Close and forget the run kept for ``workflow_id``, if any.

        Called where a fingerprint cannot tell runs apart: a run created under an id (a
        purged run's generator would match a new run started at the same instant with the
        same input and no records yet), and a run ended from outside (its ``finally`` blocks
        run now, on the engine that ended it, not at a later eviction).
        """
        kept = self.take(workflow_id)
        if kept is not None:
            close_parked(kept.gen, workflow_id)

    def keep(self, workflow_id: str, run: ParkedRun) -> None:
        evicted: list[tuple[str, ParkedRun]] = []
        with self._lock:
            self._runs[workflow_id] = run
            self._runs.move_to_end(workflow_id)
            while len(self._runs) > self._capacity:
                evicted.append(self._runs.popitem(last=False))
        for evicted_id, old in evicted:
            close_parked(old.gen, evicted_id)

    def clear(self) -> None:
        with self._lock:
            runs, self._runs = list(self._runs.items()), OrderedDict()
        for workflow_id, run in runs:
            close_parked(run.gen, workflow_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)


def close_parked(gen: Any, workflow_id: str) -> None:
    """Close a parked generator now rather than at garbage collection, so its ``finally``
    blocks run at a known point. A ``yield`` or an error inside one is reported, never
    raised: the close may happen in another workflow's drive (an eviction)."""
    try:
        gen.close()
    except RuntimeError:
        logger.warning(
            "workflow %s yields inside a finally block or catches GeneratorExit; a parked "
            "workflow is closed between wake-ups, so put cleanup in activities or sagas",
            workflow_id,
        )
    except Exception as exc:
        logger.warning(
            "workflow %s raised %s in a finally block when its parked generator was closed; "
            "put cleanup in activities or sagas",
            workflow_id,
            type(exc).__name__,
        )
