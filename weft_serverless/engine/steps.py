"""Carrying out one durable command at a slot, or answering it from the stored history.

``advance`` returns ``Done`` (the outcome plus the writes that must commit with its op record)
or ``None`` when the command cannot finish yet; anything needed to wake it later (a pending
record and its timer) is committed before returning ``None``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.commands import (
    All,
    Command,
    Race,
    Record,
    Run,
    Sleep,
    StartChild,
    WaitForSignal,
    WaitUntil,
)
from weft_serverless.errors import (
    CodecError,
    InvalidArgumentError,
    NondeterminismError,
    PayloadTooLargeError,
    WeftError,
    WorkflowAlreadyExistsError,
)
from weft_serverless.identifiers import check_workflow_id
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put
from weft_serverless.workflow import WorkflowDefinition

from . import lifecycle, timers, wakeups
from .commit import (
    LostCommit,
    commit,
    commit_cleanup,
    commit_step,
    decode_value,
)
from .outcomes import Done, Outcome, RaiseAtYield, error_from_record, error_to_record
from .ownership import Fragment
from .records import History, error_record
from .run_step import advance_run
from .runtime import Runtime, logger
from .timers import TimerKind, stale_timer_deletes, timer_ref, timer_value

_deferrals = itertools.count()


class StepRunner:
    """Advances commands of one workflow drive against its loaded history."""

    def __init__(
        self,
        rt: Runtime,
        workflow_id: str,
        definition: WorkflowDefinition,
        history: History,
        enqueue: Callable[[str], None],
    ) -> None:
        self.rt = rt
        self.workflow_id = workflow_id
        self.definition = definition
        self.history = history
        self.enqueue = enqueue
        self.awaiting: set[str] = set()
        self._signature = ""

    # -- replay --------------------------------------------------------------------------

    def check_signature(self, cmd: Command[Any], slot: str, record: dict[str, Any]) -> None:
        stored, current = record.get("sig", ""), cmd.signature()
        if stored != current:
            raise NondeterminismError(keys.describe_slot(slot), stored, current)

    def replay(self, cmd: Command[Any], slot: str, record: dict[str, Any]) -> Outcome:
        """The outcome a recorded step gives back, without re-running anything."""
        self.check_signature(cmd, slot, record)
        if not record.get("ok", True):
            return Outcome(error=error_from_record(record["err"]))
        if isinstance(cmd, All):
            values = []
            for index, branch in enumerate(cmd.commands):
                sub = keys.branch_slot(slot, index)
                outcome = self.replay(branch, sub, self.history.ops[sub])
                values.append(outcome.value)
            return Outcome(values)
        if isinstance(cmd, Race):
            return Outcome((record["i"], decode_value(record)))
        return Outcome(decode_value(record))

    # -- live ----------------------------------------------------------------------------

    def advance(self, cmd: Command[Any], slot: str) -> Done | None:
        self._check_parked_signature(cmd, slot)
        self._signature = cmd.signature()
        if isinstance(cmd, Run):
            return advance_run(self, cmd, slot)
        if isinstance(cmd, Sleep):
            return self._sleep(cmd, slot)
        if isinstance(cmd, WaitForSignal):
            return self._wait(cmd, slot)
        if isinstance(cmd, All):
            return self._all(cmd, slot)
        if isinstance(cmd, Race):
            return self._race(cmd, slot)
        if isinstance(cmd, StartChild):
            return self._child(cmd, slot)
        if isinstance(cmd, Record):
            return self._record(cmd, slot)
        if isinstance(cmd, WaitUntil):
            return self._until(cmd, slot)
        raise TypeError(f"unknown command {cmd!r}")

    def _check_parked_signature(self, cmd: Command[Any], slot: str) -> None:
        """A step parked on a pending record must be resumed by the same operation."""
        attempts = self.history.attempts.get(slot)
        for record in (self.history.pending.get(slot), attempts[-1] if attempts else None):
            stored = (record or {}).get("sig")
            if stored and stored != cmd.signature():
                raise NondeterminismError(keys.describe_slot(slot), stored, cmd.signature())

    def commit_done(self, cmd: Command[Any], slot: str, done: Done) -> None:
        """Write a finished step's op record together with its effects."""
        record = {"sig": cmd.signature(), "at": self.rt.now(), **done.record}
        key = keys.op_key(self.workflow_id, slot)
        conditions = [Condition(key, None), *done.conditions]
        ops: list[Op] = [Put(key, encode(record)), *done.ops]
        left = commit_step(self.rt, self.workflow_id, conditions, ops, done.cleanup)
        self.rt.metrics.steps_committed += 1
        self.history.ops[slot] = record
        self.history.note(ops)
        for callback in done.after_commit:
            callback()
        commit_cleanup(self.rt, self.workflow_id, left)

    def park(
        self,
        record_key: Key,
        record: dict[str, Any],
        due: float,
        kind: TimerKind,
        suffix: str,
        also: Sequence[Op] = (),
    ) -> dict[str, Any]:
        """Commit a pending fact together with the timer that will wake the workflow (and
        ``also``, in the same batch)."""
        timer = timers.timer_key(kind, self.workflow_id, due, suffix)
        stored = {**record, "sig": self._signature, "due": due, "timer": timer_ref(timer)}
        self.commit_parking(
            [Condition(record_key, None)],
            [
                Put(record_key, encode(stored)),
                Put(timer, timer_value(self.workflow_id, kind)),
                *also,
            ],
        )
        return stored

    def commit_parking(self, conditions: list[Condition], ops: list[Op]) -> None:
        """Commit a batch that parks the run; it takes the run's wake-up with it."""
        commit(self.rt, self.workflow_id, conditions, ops + wakeups.disarm(self.history))
        wakeups.disarmed(self.history)

    def finish(self, slot: str, outcome: Outcome, record: dict[str, Any], **extra: Any) -> Done:
        done = Done(outcome, record, **extra)
        done.cleanup.extend(stale_timer_deletes(self.history, slot, self.rt.now()))
        return done

    def log_warning(self, message: str) -> None:
        logger.warning("workflow %s: %s", self.workflow_id, message)

    def yield_to_next_invocation(self, slot: str, attempt: int) -> None:
        """Too little time left to start this step: park behind a timer that is due now."""
        now = self.rt.now()
        deferral = keys.counter(next(_deferrals), 8)
        suffix = f"{slot}#{attempt}#{keys.ms(now)}.{deferral}"  # never reuses a key
        self.commit_parking([], [timers.arm(timers.BUDGET, self.workflow_id, now, suffix)])
        self.rt.metrics.incr("steps_deferred_for_budget")

    def _timer_due(self, slot: str, seconds: float, kind: TimerKind) -> bool:
        """Whether the step's timer has fallen due; the first call parks it durably."""
        pending = self.history.pending.get(slot)
        if pending is None:
            if seconds <= 0:
                return True
            key = keys.pending_key(self.workflow_id, slot)
            pending = self.park(key, {}, self.rt.now() + seconds, kind, slot)
            self.history.pending[slot] = pending
        due: float = pending["due"]
        return keys.is_due(self.rt.now(), due)

    def _sleep(self, cmd: Sleep, slot: str) -> Done | None:
        if self._timer_due(slot, cmd.seconds, timers.SLEEP):
            return Done(Outcome(None), {})
        return None

    def _wait(self, cmd: WaitForSignal, slot: str) -> Done | None:
        queue = self.history.signals.get(cmd.name)
        if queue:
            sort, raw, signal = queue[0]
            key = Key(keys.workflow_partition(self.workflow_id), sort)
            ops: list[Op] = [Delete(key)]
            after_commit: list[Callable[[], object]] = [lambda: queue.pop(0)]
            if signal.get("timer"):
                ops += wakeups.adopt(self.history, signal["timer"])
                after_commit.append(lambda: wakeups.adopted(self.history, signal["timer"]))
            return self.finish(
                slot,
                Outcome(decode(signal["v"])),
                {"v": signal["v"]},
                conditions=[Condition(key, raw)],
                ops=ops,
                after_commit=after_commit,
            )
        self.awaiting.add(cmd.name)
        if cmd.timeout is not None and self._timer_due(slot, cmd.timeout, timers.SIGNAL_TIMEOUT):
            return Done(Outcome(None), {})
        return None

    def _all(self, cmd: All, slot: str) -> Done | None:
        values: list[Any] = []
        parked = False
        for index, branch in enumerate(cmd.commands):
            sub = keys.branch_slot(slot, index)
            record = self.history.ops.get(sub)
            if record is not None:
                outcome = self.replay(branch, sub, record)
            else:
                done = self.advance(branch, sub)
                if done is None:
                    parked = True
                    values.append(None)
                    continue
                self.commit_done(branch, sub, done)
                outcome = done.outcome
            if outcome.error is not None:
                err = error_to_record(outcome.error)
                return self.finish(slot, Outcome(error=outcome.error), {"ok": False, "err": err})
            values.append(outcome.value)
        if parked:
            return None
        return self.finish(slot, Outcome(values), {"n": len(values)})

    def _race(self, cmd: Race, slot: str) -> Done | None:
        for index, branch in enumerate(cmd.commands):
            sub = keys.branch_slot(slot, index)
            done = self.advance(branch, sub)
            if done is None:
                continue
            if done.outcome.error is not None:
                record = {"ok": False, "i": index, "err": error_to_record(done.outcome.error)}
            else:
                record = {"i": index, "v": encode(done.outcome.value)}
            outcome = (
                done.outcome
                if done.outcome.error is not None
                else Outcome((index, done.outcome.value))
            )
            return self.finish(
                slot,
                outcome,
                record,
                conditions=done.conditions,
                ops=done.ops,
                after_commit=done.after_commit,
                cleanup=done.cleanup,
            )
        return None

    def _child(self, cmd: StartChild, slot: str) -> Done | None:
        result = self.history.children.get(slot)
        if result is not None:
            if result["status"] == "completed":
                return Done(Outcome(decode_value(result)), {"v": result.get("v")})
            err = error_record(
                "child",
                result.get("type", ""),
                result.get("message", ""),
                child_id=result["child_id"],
                status=result["status"],
            )
            return Done(Outcome(error=error_from_record(err)), {"ok": False, "err": err})
        if slot in self.history.pending:
            return None
        try:
            encoded_input = self.rt.encode_payload(
                cmd.input, f"input of child {cmd.workflow_type!r}"
            )
        except (CodecError, PayloadTooLargeError) as exc:
            raise RaiseAtYield(exc) from None
        try:  # a derived id grows with each generation, so it can pass the limit
            child_id = check_workflow_id(cmd.id or f"{self.workflow_id}/{slot}", "child id")
        except InvalidArgumentError as exc:
            raise RaiseAtYield(exc) from None

        def start(epoch: bytes | None) -> Fragment | WeftError:
            return lifecycle.child_start_fragment(
                self.rt,
                self.workflow_id,
                slot,
                cmd.workflow_type,
                child_id,
                encoded_input,
                cmd.parent_close_policy,
                cmd.signature(),
                epoch,
            )

        try:
            if cmd.parent_close_policy != "await":
                # The step's result is the child id: start and record it in one batch. A
                # refused batch only makes the drive re-read, so what holds the id is read
                # first (an awaited start reads it only when refused).
                return self._child_started(
                    cmd, slot, child_id, start(self._child_epoch(slot, child_id))
                )
            fragment = start(None)
            if isinstance(fragment, WeftError):
                return self._child_not_started(child_id, fragment)
            fragment.ops += wakeups.disarm(self.history)
            if not lifecycle.commit_child_start(self.rt, self.workflow_id, child_id, fragment):
                # Refused: the id is held (raises), or a purged run of it left an epoch to
                # claim on top of; anything else is a racing writer, so re-read.
                epoch = self._child_epoch(slot, child_id)
                retry = start(epoch) if epoch is not None else None
                if isinstance(retry, Fragment):
                    retry.ops += wakeups.disarm(self.history)
                if not isinstance(retry, Fragment) or not lifecycle.commit_child_start(
                    self.rt, self.workflow_id, child_id, retry
                ):
                    raise LostCommit(self.workflow_id)
        except WorkflowAlreadyExistsError as exc:
            return self._child_not_started(child_id, exc)
        wakeups.disarmed(self.history)
        self.history.pending[slot] = {"child_id": child_id, "policy": "await"}
        self.enqueue(child_id)
        return None

    def _child_epoch(self, slot: str, child_id: str) -> bytes | None:
        return lifecycle.child_start_epoch(self.rt, self.workflow_id, slot, child_id)

    def _child_started(
        self, cmd: StartChild, slot: str, child_id: str, fragment: Fragment | WeftError
    ) -> Done:
        """The step of a non-awaited child: its id, committed with the child's start."""
        if isinstance(fragment, WeftError):
            return self._child_not_started(child_id, fragment)
        return Done(
            Outcome(child_id),
            {"v": encode(child_id)},
            conditions=fragment.conditions,
            ops=fragment.ops,
            after_commit=[
                lambda: self.rt.fence.claim_landed(child_id),
                lambda: self.rt.parked.discard(child_id),
                lambda: self.history.pending.__setitem__(
                    slot, {"child_id": child_id, "policy": cmd.parent_close_policy}
                ),
                lambda: self.enqueue(child_id),
            ],
        )

    def _child_not_started(self, child_id: str, error: WeftError) -> Done:
        err = error_record("child", error.code, str(error), child_id=child_id, status="not-started")
        return Done(Outcome(error=error_from_record(err)), {"ok": False, "err": err})

    def _until(self, cmd: WaitUntil, slot: str) -> Done | None:
        try:
            holds = bool(cmd.predicate())
        except Exception as exc:
            raise RaiseAtYield(exc) from None
        if holds:
            return self.finish(slot, Outcome(True), {"v": encode(True)})
        if cmd.timeout is not None and self._timer_due(slot, cmd.timeout, timers.CONDITION_TIMEOUT):
            return Done(Outcome(False), {"v": encode(False)})
        return None

    def _record(self, cmd: Record, slot: str) -> Done | None:
        try:
            value = cmd.compute()
            data = self.rt.encode_payload(value, f"value of {cmd.name}")
        except Exception as exc:
            raise RaiseAtYield(exc) from None
        return Done(Outcome(decode(data)), {"v": data})
