"""Activity branches of ``all``, ``race`` and ``map`` running at the same time.

Attempts start on the engine's activity threads (``async def`` ones on its event loop); each
``all`` above a branch bounds how many of its attempts run at once (its ``Group``). The drive's
thread watches them and records each branch the moment it ends, in whatever order they end,
so a crash or the invocation's end mid-fan-out leaves every finished branch recorded and only
the rest to run again. Replay reads each branch's own record: the order they finished in
never shows. A branch whose composite was decided by another (a race won, an ``all`` failed)
is given up, or never started.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from weft_serverless.commands import Run
from weft_serverless.engine.persistence.outcomes import Done
from weft_serverless.engine.steps import activities
from weft_serverless.engine.steps.attempt import Attempt, give_up, start, watch
from weft_serverless.engine.steps.scope import StepScope

Decide = Callable[[int, Done], bool]
"""Called on the drive's thread as each branch finishes (its index, its outcome): True
decides the whole fan-out, and the attempts still running are given up."""


@dataclass(slots=True)
class Group:
    """The branches beneath one ``all``: at most ``limit`` of their attempts run at once."""

    limit: int
    running: int = 0


def _never() -> bool:
    return False


@dataclass(slots=True)
class Branch:
    index: int
    cmd: Run
    slot: str
    groups: tuple[Group, ...] = ()
    settled: Callable[[], bool] = field(default=_never)
    """True once the composite this branch belongs to is decided: it need not run."""

    def may_start(self) -> bool:
        return all(group.running < group.limit for group in self.groups)

    def started(self, step: int) -> None:
        for group in self.groups:
            group.running += step


def run_together(
    scope: StepScope,
    branches: list[Branch],
    decide: Decide,
    pool: Group | None = None,
    due: Callable[[], bool] | None = None,
    wake: Callable[[], bool] | None = None,
) -> None:
    """Run the branches' attempts together until each finished or parked (a retry backoff,
    an async completion, the next invocation, a cancelled run), or ``decide`` ended the
    fan-out. ``pool``: a group every branch is in (the root ``all``'s), which bounds the
    whole fan-out. When ``due()`` turns true while they run (a race's sleep fell due),
    ``wake()`` is called: True from it ends the fan-out too. What finished reached
    ``decide``."""
    running: dict[Attempt, tuple[Branch, activities.Ready]] = {}

    def record(branch: Branch, outcome: Done | str | None) -> bool:
        """File a branch's conclusion; True when ``decide`` ends the fan-out."""
        if outcome == activities.AGAIN:
            waiting.appendleft(branch)  # its retry is due already: prepared next
            return False
        if outcome is None or isinstance(outcome, str):
            return False  # parked: a later drive finishes it
        return decide(branch.index, outcome)

    waiting = deque(branches)
    try:
        _loop(scope, waiting, running, record, pool, due, wake)
    finally:
        _stop(scope, running)  # an error mid-fan-out: nothing is left running for it


def _loop(
    scope: StepScope,
    waiting: deque[Branch],
    running: dict[Attempt, tuple[Branch, activities.Ready]],
    record: Callable[[Branch, Done | str | None], bool],
    pool: Group | None,
    due: Callable[[], bool] | None,
    wake: Callable[[], bool] | None,
) -> None:
    """Start and watch attempts until none is left or ``record``/``wake`` ends the fan-out."""
    rt = scope.rt
    while waiting or running:
        if _fill(scope, waiting, running, record, pool):
            return
        if not running:
            break
        for attempt, verdict in watch(rt, list(running), due):
            branch, ready = running.pop(attempt)
            branch.started(-1)
            if branch.settled():
                continue  # its composite was decided by a branch that ended beside it
            scope.begin(branch.cmd, branch.slot)
            if record(branch, activities.conclude(scope, branch.slot, ready, verdict)):
                return
        if due is not None and wake is not None and due() and wake():
            return
        for attempt, (branch, _) in list(running.items()):
            if branch.settled():  # a race it was in was won, an all it was in failed
                del running[attempt]
                branch.started(-1)
                give_up(rt, attempt)


def _fill(
    scope: StepScope,
    waiting: deque[Branch],
    running: dict[Attempt, tuple[Branch, activities.Ready]],
    record: Callable[[Branch, Done | str | None], bool],
    pool: Group | None,
) -> bool:
    """Start the waiting branches their groups have room for, in order; True when one that
    needed no attempt (an async answer, a reconciliation) ended the fan-out."""
    rt = scope.rt
    held: list[Branch] = []
    while waiting and (pool is None or pool.running < pool.limit):
        branch = waiting.popleft()
        if branch.settled():
            continue
        if not branch.may_start():
            held.append(branch)
            continue
        scope.begin(branch.cmd, branch.slot)
        ready = activities.prepare(scope, branch.cmd, branch.slot)
        if not isinstance(ready, activities.Ready):
            if record(branch, ready):
                return True
            continue
        if ready.result is not None:  # answered by an async completion
            if record(branch, activities.conclude(scope, branch.slot, ready, ready.result)):
                return True
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
            held.append(branch)  # every thread is busy: wait for one of ours
            break
        running[attempt] = (branch, ready)
        branch.started(1)
    waiting.extendleft(reversed(held))
    return False


def _stop(scope: StepScope, running: dict[Attempt, tuple[Branch, activities.Ready]]) -> None:
    """The fan-out is decided: the attempts still running lose, their results are void."""
    for attempt, (branch, _) in running.items():
        branch.started(-1)
        give_up(scope.rt, attempt)
    running.clear()
