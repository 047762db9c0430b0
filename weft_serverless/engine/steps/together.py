"""Activity branches of ``all``, ``race`` and ``map`` running at the same time.

Attempts start on the engine's activity threads (``async def`` ones on its event loop), at
most ``limit`` of this step's at once; the drive's thread watches them and records each
branch the moment it ends, in whatever order they end, so a crash or the invocation's end
mid-fan-out leaves every finished branch recorded and only the rest to run again. Replay reads
each branch's own record: the order they finished in never shows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from weft_serverless.commands import Run

from ..outcomes import Done
from . import activities
from .attempt import Attempt, give_up, start, watch
from .scope import StepScope

Decide = Callable[[int, Done], bool]
"""Called on the drive's thread as each branch finishes (its index, its outcome): True
decides the step, and the attempts still running are given up."""


@dataclass(slots=True)
class Branch:
    index: int
    cmd: Run
    slot: str


def run_together(
    scope: StepScope,
    branches: list[Branch],
    limit: int,
    decide: Decide,
    until: Callable[[], bool] | None = None,
) -> None:
    """Run the branches' attempts together until each finished or parked (a retry backoff,
    an async completion, the next invocation, a cancelled run), ``decide`` stopped them, or
    ``until`` said to stop watching. What finished reached ``decide``."""
    waiting = deque(branches)
    running: dict[Attempt, tuple[Branch, activities.Ready]] = {}

    def record(branch: Branch, outcome: Done | str | None) -> bool:
        """File a branch's conclusion; True when ``decide`` ends the step."""
        if outcome == activities.AGAIN:
            waiting.appendleft(branch)  # its retry is due already: prepared next
            return False
        if outcome is None or isinstance(outcome, str):
            return False  # parked: a later drive finishes it
        return decide(branch.index, outcome)

    try:
        _loop(scope, waiting, running, limit, record, until)
    finally:
        _stop(scope, running)  # an error mid-fan-out: nothing is left running for it


def _loop(
    scope: StepScope,
    waiting: deque[Branch],
    running: dict[Attempt, tuple[Branch, activities.Ready]],
    limit: int,
    record: Callable[[Branch, Done | str | None], bool],
    until: Callable[[], bool] | None,
) -> None:
    """Start and watch attempts until none is left, ``record`` decides, or ``until``."""
    rt = scope.rt
    while waiting or running:
        while waiting and len(running) < limit:
            branch = waiting.popleft()
            scope.begin(branch.cmd, branch.slot)
            ready = activities.prepare(scope, branch.cmd, branch.slot)
            if not isinstance(ready, activities.Ready):
                if record(branch, ready):
                    return
                continue
            if ready.result is not None:  # answered by an async completion
                if record(branch, activities.conclude(scope, branch.slot, ready, ready.result)):
                    return
                continue
            attempt = ready.attempt(rt)
            free = start(
                rt,
                ready.activity,
                ready.encoded_input,
                attempt,
                inline=False,
                wait_for_place=not running,
            )
            if not free:
                waiting.appendleft(branch)  # every thread is busy: wait for one of ours
                break
            running[attempt] = (branch, ready)
        if not running:
            break
        for attempt, verdict in watch(rt, list(running), until):
            branch, ready = running.pop(attempt)
            scope.begin(branch.cmd, branch.slot)
            if record(branch, activities.conclude(scope, branch.slot, ready, verdict)):
                return
        if until is not None and until():
            return


def _stop(scope: StepScope, running: dict[Attempt, tuple[Branch, activities.Ready]]) -> None:
    """The step is decided: the attempts still running lose, their results are void."""
    for attempt in running:
        give_up(scope.rt, attempt)
    running.clear()
