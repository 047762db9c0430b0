"""Carrying out one durable command at a slot, or answering it from the stored history.

``advance`` returns ``Done`` (the outcome plus the writes that must commit with its op record)
or ``None`` when the command cannot finish yet; anything needed to wake it later (a pending
record and its timer) is committed before returning ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
)
from weft_serverless.errors import (
    ActivityFailedError,
    ChildWorkflowFailedError,
    CodecError,
    NondeterminismError,
    PayloadTooLargeError,
    WeftError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put
from weft_serverless.workflow import WorkflowDefinition

from . import lifecycle
from .activities import run_attempt
from .commit import commit, decode_value, stale_timer_deletes, timer_ref, timer_value
from .records import History, error_record
from .runtime import Runtime


@dataclass(slots=True)
class Outcome:
    """What the generator receives at its yield: a value, or an error to raise there."""

    value: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class Done:
    outcome: Outcome
    record: dict[str, Any]
    conditions: list[Condition] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    after_commit: list[Callable[[], None]] = field(default_factory=list)


def error_from_record(err: dict[str, Any]) -> BaseException:
    """Rebuild the exception a stored failure raises at the workflow's yield."""
    kind = err.get("kind")
    if kind == "activity":
        return ActivityFailedError(err["activity"], err["type"], err["message"], err["attempts"])
    if kind == "child":
        return ChildWorkflowFailedError(err["child_id"], err["status"], err["type"], err["message"])
    return WeftError(f"{err.get('type')}: {err.get('message')}")


def error_to_record(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ActivityFailedError):
        return error_record(
            "activity",
            exc.error_type,
            exc.error_message,
            activity=exc.activity,
            attempts=exc.attempts,
        )
    if isinstance(exc, ChildWorkflowFailedError):
        return error_record(
            "child", exc.error_type, exc.error_message, child_id=exc.child_id, status=exc.status
        )
    return error_record("error", type(exc).__name__, str(exc))


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

    # -- replay --------------------------------------------------------------------------

    def check_signature(self, cmd: Command[Any], slot: str, record: dict[str, Any]) -> None:
        stored, current = record.get("sig", ""), cmd.signature()
        if stored != current:
            raise NondeterminismError(slot.lstrip("0") or "0", stored, current)

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
        if isinstance(cmd, Run):
            return self._run(cmd, slot)
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
        raise TypeError(f"unknown command {cmd!r}")

    def commit_done(self, cmd: Command[Any], slot: str, done: Done) -> None:
        """Write a finished step's op record together with its effects."""
        record = {"sig": cmd.signature(), **done.record}
        key = keys.op_key(self.workflow_id, slot)
        conditions = [Condition(key, None), *done.conditions]
        ops: list[Op] = [Put(key, encode(record)), *done.ops]
        commit(self.rt, self.workflow_id, conditions, ops)
        self.rt.metrics.steps_committed += 1
        self.history.ops[slot] = record
        for callback in done.after_commit:
            callback()

    def _park(
        self, record_key: Key, record: dict[str, Any], due: float, kind: str, tag: str
    ) -> dict[str, Any]:
        """Commit a pending fact together with the timer that will wake the workflow."""
        timer = keys.timer_key(due, self.workflow_id, tag)
        stored = {**record, "due": due, "timer": timer_ref(timer)}
        commit(
            self.rt,
            self.workflow_id,
            [Condition(record_key, None)],
            [Put(record_key, encode(stored)), Put(timer, timer_value(self.workflow_id, kind))],
        )
        return stored

    def _finish(self, slot: str, outcome: Outcome, record: dict[str, Any], **extra: Any) -> Done:
        done = Done(outcome, record, **extra)
        done.ops.extend(stale_timer_deletes(self.history, slot, self.rt.now()))
        return done

    def _run(self, cmd: Run, slot: str) -> Done | None:
        try:
            encoded_input = self.rt.encode_payload(cmd.input, f"input of activity {cmd.activity!r}")
        except (CodecError, PayloadTooLargeError) as exc:
            raise RaiseAtYield(exc) from None
        activity = self.rt.activity(self.definition, cmd.activity)
        attempts = self.history.attempts.setdefault(slot, [])
        while True:
            if attempts and self.rt.now() < attempts[-1]["due"]:
                return None
            number = len(attempts) + 1
            if self.rt.low_on_time(cmd.timeout):
                self._yield_to_next_invocation(slot, number)
                return None
            result = run_attempt(self.rt, activity, cmd, encoded_input)
            if result.ok:
                value = decode(result.value) if result.value is not None else None
                return self._finish(slot, Outcome(value), {"v": result.value, "a": number})
            if result.retryable and number < cmd.retry.max_attempts:
                self.rt.metrics.activity_retries += 1
                due = self.rt.now() + cmd.retry.backoff(number)
                stored = self._park(
                    keys.attempt_key(self.workflow_id, slot, number),
                    {"n": number, "type": result.error_type, "message": result.message},
                    due,
                    "retry",
                    f"r{slot}#{number}",
                )
                attempts.append(stored)
                continue
            err = error_record(
                "activity",
                result.error_type,
                result.message,
                activity=cmd.activity,
                attempts=number,
            )
            return self._finish(
                slot, Outcome(error=error_from_record(err)), {"ok": False, "err": err}
            )

    def _yield_to_next_invocation(self, slot: str, attempt: int) -> None:
        """Too little time left to start this step: park behind a timer that is due now."""
        now = self.rt.now()
        timer = keys.timer_key(now, self.workflow_id, f"b{slot}#{attempt}#{keys.ms(now)}")
        commit(self.rt, self.workflow_id, [], [Put(timer, timer_value(self.workflow_id, "budget"))])
        self.rt.metrics.incr("steps_deferred_for_budget")

    def _sleep(self, cmd: Sleep, slot: str) -> Done | None:
        pending = self.history.pending.get(slot)
        if pending is None:
            if cmd.seconds <= 0:
                return Done(Outcome(None), {})
            due = self.rt.now() + cmd.seconds
            pending = self._park(
                keys.pending_key(self.workflow_id, slot), {}, due, "sleep", "s" + slot
            )
            self.history.pending[slot] = pending
        if self.rt.now() >= pending["due"]:
            return Done(Outcome(None), {})
        return None

    def _wait(self, cmd: WaitForSignal, slot: str) -> Done | None:
        queue = self.history.signals.get(cmd.name)
        if queue:
            sort, raw, signal = queue[0]
            key = Key(keys.workflow_partition(self.workflow_id), sort)
            ops: list[Op] = [Delete(key)]
            if signal.get("timer"):
                ops.append(Delete(Key(*signal["timer"])))
            return self._finish(
                slot,
                Outcome(decode(signal["v"])),
                {"v": signal["v"]},
                conditions=[Condition(key, raw)],
                ops=ops,
                after_commit=[lambda: queue.pop(0)],
            )
        self.awaiting.add(cmd.name)
        if cmd.timeout is None:
            return None
        pending = self.history.pending.get(slot)
        if pending is None:
            if cmd.timeout <= 0:
                return Done(Outcome(None), {})
            due = self.rt.now() + cmd.timeout
            pending = self._park(
                keys.pending_key(self.workflow_id, slot), {}, due, "timeout", "w" + slot
            )
            self.history.pending[slot] = pending
        if self.rt.now() >= pending["due"]:
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
                return self._finish(slot, Outcome(error=outcome.error), {"ok": False, "err": err})
            values.append(outcome.value)
        if parked:
            return None
        return self._finish(slot, Outcome(values), {"n": len(values)})

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
            return self._finish(
                slot,
                outcome,
                record,
                conditions=done.conditions,
                ops=done.ops,
                after_commit=done.after_commit,
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
        child_id = cmd.id or f"{self.workflow_id}/{slot}"
        started = lifecycle.start_child(
            self.rt, self.workflow_id, slot, cmd.workflow_type, child_id, encoded_input
        )
        if isinstance(started, WeftError):
            err = error_record(
                "child", started.code, str(started), child_id=child_id, status="not-started"
            )
            return Done(Outcome(error=error_from_record(err)), {"ok": False, "err": err})
        self.history.pending[slot] = started
        self.enqueue(child_id)
        return None

    def _record(self, cmd: Record, slot: str) -> Done | None:
        try:
            value = cmd.compute()
            data = self.rt.encode_payload(value, f"value of {cmd.name}")
        except Exception as exc:
            raise RaiseAtYield(exc) from None
        return Done(Outcome(decode(data)), {"v": data})


class RaiseAtYield(Exception):
    """Internal: an error to throw into the generator at this yield, with nothing recorded."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
