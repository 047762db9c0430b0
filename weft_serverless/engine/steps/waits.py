"""Steps that wait: a durable sleep, a signal (with its timeout), a condition (with its
timeout). Each parks a pending record with the timer that wakes the run when it falls due."""

from __future__ import annotations

from collections.abc import Callable

from weft_serverless.codec import decode, encode
from weft_serverless.commands import Sleep, WaitForSignal, WaitUntil
from weft_serverless.engine.persistence import timers, wakeups
from weft_serverless.engine.persistence.outcomes import Done, Outcome, RaiseAtYield
from weft_serverless.engine.persistence.stored_records import OpRecord, PendingRecord
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op


def timer_due(scope: StepScope, slot: str, seconds: float, kind: timers.TimerKind) -> bool:
    """Whether the step's timer has fallen due; the first call parks it durably."""
    pending = scope.history.pending.get(slot)
    if pending is None:
        if seconds <= 0:
            return True
        key = keys.pending_key(scope.workflow_id, slot)
        pending = scope.park(key, PendingRecord(), scope.rt.now() + seconds, kind, slot)
        scope.history.pending[slot] = pending
    due = pending.due
    assert due is not None, f"step {slot} waits on a record with no due time"
    return keys.is_due(scope.rt.now(), due)


def sleep(scope: StepScope, cmd: Sleep, slot: str) -> Done | None:
    if timer_due(scope, slot, cmd.seconds, timers.SLEEP):
        return Done(Outcome(None), OpRecord())
    return None


def wait_for_signal(scope: StepScope, cmd: WaitForSignal, slot: str) -> Done | None:
    history = scope.history
    queue = history.signals.get(cmd.name)
    if queue:
        sort, raw, signal = queue[0]
        assert signal.value is not None, f"signal record {sort!r} holds no payload"
        key = Key(keys.workflow_partition(scope.workflow_id), sort)
        ops: list[Op] = [Delete(key)]
        after_commit: list[Callable[[], object]] = [queue.popleft]
        timer = signal.timer
        if timer:
            ops += wakeups.adopt(history, timer)
            after_commit.append(lambda: wakeups.adopted(history, timer))
        return scope.finish(
            slot,
            Outcome(decode(signal.value)),
            OpRecord.holding(signal.value),
            conditions=[Condition(key, raw)],
            ops=ops,
            after_commit=after_commit,
        )
    scope.awaiting.add(cmd.name)
    if cmd.timeout is not None and timer_due(scope, slot, cmd.timeout, timers.SIGNAL_TIMEOUT):
        return Done(Outcome(None), OpRecord())
    return None


def wait_until(scope: StepScope, cmd: WaitUntil, slot: str) -> Done | None:
    try:
        holds = bool(cmd.predicate())
    except Exception as exc:
        raise RaiseAtYield(exc) from None
    if holds:
        return scope.finish(slot, Outcome(True), OpRecord.holding(encode(True)))
    if cmd.timeout is not None and timer_due(scope, slot, cmd.timeout, timers.CONDITION_TIMEOUT):
        return Done(Outcome(False), OpRecord.holding(encode(False)))
    return None
