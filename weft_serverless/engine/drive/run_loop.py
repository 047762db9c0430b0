"""Drives one workflow generator: replay from the op log, carry out new steps, park or finish.

Recovery is positional memoised re-execution: the generator runs from the top and the
command yielded at step ``n`` is answered from op record ``n`` when it exists. Updates
recorded at step ``n`` are re-applied there first, so handler state is rebuilt in the same
order it was built live. Only past the recorded history does anything run for real.
Queries and other reads replay on a path of their own (engine/drive/replay.py), which writes
nothing; this one is the write path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.commands import Command
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.drive.replay import registered
from weft_serverless.engine.persistence.outcomes import Done, Outcome, RaiseAtYield
from weft_serverless.engine.persistence.records import (
    COMPLETED,
    FAILED,
    RUNNING,
    History,
    error_record,
    history_of,
    load_history,
)
from weft_serverless.engine.process.parked_runs import ParkedRun, close_parked
from weft_serverless.engine.process.telemetry import RunFields, run_fields
from weft_serverless.engine.runs import continuation, finalizers, transitions, updates
from weft_serverless.engine.runs.commit import commit_deferred
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.engine.steps.runner import AtYield, StepRunner
from weft_serverless.errors import (
    ActivityReconciliationError,
    CodecError,
    CommandNotYieldedError,
    HistoryLimitExceededError,
    InvalidArgumentError,
    NondeterminismError,
    PayloadTooLargeError,
    StorageLimitError,
    VersionMismatchError,
)
from weft_serverless.storage import keys
from weft_serverless.workflow import WorkflowDefinition

# What a drive reports: a workflow status, or an ownership verdict when it did not drive.
RETAIN = "retain"
COLLECT = "collect"
BUSY = "busy"
DEPOSED = "deposed"
_CONTINUED = "continued"  # internal: the run continued as new (see ``drive.guarded``)


@dataclass(slots=True)
class DriveRequest:
    """What a drive should do besides advancing: deliver an update to the run where it parks."""

    awaiting: set[str] = field(default_factory=set)
    update: updates.IncomingUpdate | None = None


def drive(
    rt: Runtime,
    workflow_id: str,
    enqueue: Callable[[str], None],
    request: DriveRequest | None = None,
) -> str | None:
    """Advance a workflow as far as it can go now; returns its status afterwards (None: gone).

    A run that continues as new is driven again by a later drive of its id (queued here),
    unless an update waits to be applied: then this drive carries the new run on to its
    first park point and applies the update there.
    """
    request = request or DriveRequest()
    with run_fields(workflow_id) as fields:
        while True:
            status = _drive_once(rt, workflow_id, enqueue, request, fields)
            commit_deferred(rt, workflow_id)  # a drive that claimed nothing lands here
            if status != _CONTINUED:
                return status
            if request.update is None:
                enqueue(workflow_id)
                return RUNNING


def _drive_once(
    rt: Runtime,
    workflow_id: str,
    enqueue: Callable[[str], None],
    request: DriveRequest,
    fields: RunFields,
) -> str | None:
    rows = rt.fence.prefetched(workflow_id)  # read by the wake's claim (ADR 0058)
    history = (
        load_history(rt.storage, workflow_id) if rows is None else history_of(workflow_id, rows)
    )
    if history is None or history.state.status != RUNNING:
        rt.parked.discard(workflow_id)
        return None if history is None else history.state.status
    fields.workflow_type = history.state.type
    rt.fence.confirm_history(workflow_id, history)
    continuation.forget_earlier_runs(rt, history)
    definition = registered(rt, history)
    if definition is None:
        return RETAIN  # its timers stay for an engine that registers the type
    if not definition.accepts_version(history.state.version):
        error = VersionMismatchError(workflow_id, history.state.version, definition.version)
        return _fail(rt, history, error)
    runner = StepRunner(rt, workflow_id, definition, history, enqueue)
    runner.awaiting = request.awaiting
    fields.step = lambda: keys.describe_slot(runner.slot) if runner.slot else None
    if rt.tracer is None:
        return _advance(rt, history, runner, request)
    from weft_serverless.engine.process.tracing import (
        traceparent_of,  # only with a tracer: no import cost without one
    )

    state = history.state
    return rt.tracer.drive(
        workflow_id,
        traceparent_of(rt.tracer, state.extra, workflow_id, state.created_at),
        {"weft.workflow_id": workflow_id, "weft.workflow_type": state.type, "weft.run": state.run},
        lambda: _advance(rt, history, runner, request),
    )


def _advance(rt: Runtime, history: History, runner: StepRunner, request: DriveRequest) -> str:
    """Run the code on from the generator this engine parked, or from the top."""
    definition = runner.definition
    warm = _warm(rt, history, definition)
    if warm is not None:
        return _Run(rt, history, warm.ctx, runner, warm.gen, request).loop(warm)
    ctx = WorkflowContext(history.state.id, definition, rt.now, rt.encode_payload)
    try:
        gen = definition.fn(ctx, decode(history.state.input))
    except Exception as exc:
        return _fail(rt, history, exc)
    return _Run(rt, history, ctx, runner, gen, request).loop()


def _warm(rt: Runtime, history: History, definition: WorkflowDefinition) -> ParkedRun | None:
    """The generator this engine parked for this run, if the stored history still matches."""
    kept = rt.parked.take(history.state.id)
    if kept is None:
        return None
    if kept.definition is definition and kept.fingerprint == history.replay_fingerprint():
        return kept
    close_parked(kept.gen, history.state.id)
    return None


class _Run:
    """One drive of a run's code: each command it yields is replayed from its record or
    carried out, until the run parks (``RUNNING``) or ends (its final status)."""

    def __init__(
        self,
        rt: Runtime,
        history: History,
        ctx: WorkflowContext,
        runner: StepRunner,
        gen: Any,
        request: DriveRequest,
    ) -> None:
        self.rt, self.history, self.ctx, self.runner = rt, history, ctx, runner
        self.gen, self.request = gen, request

    def loop(self, warm: ParkedRun | None = None) -> str:
        """Run the generator from the top, or on from where ``warm`` left it parked."""
        if warm is None:
            result: Outcome | str = Outcome()
        else:  # its updates are applied and its step is not recorded yet
            self.runner.step = warm.step
            self.ctx.is_replaying = False
            slot = keys.step_slot(self.runner.first + warm.step - 1)
            result = self._take_step(warm.cmd, slot, resumed=True)
        while isinstance(result, Outcome):
            result = self._next(result)
        return result

    def _next(self, outcome: Outcome) -> Outcome | str:
        """Hand the code the outcome of its last command; replay or carry out the next."""
        slot = self.runner.next_slot()
        self.ctx.is_replaying = slot in self.history.ops
        cmd = self._resume(outcome)
        if isinstance(cmd, str):
            return cmd
        at_yield = self.runner.at_yield(cmd)
        if at_yield is not None:
            return self._answer(at_yield, cmd)
        self.runner.step += 1
        return self._take_step(cmd, slot)

    def _resume(self, outcome: Outcome) -> Command[Any] | str:
        """Send the outcome into the code: the command it yields next, or the status the
        run ends in when the code returns or raises here."""
        try:
            if outcome.error is None:
                cmd = self.gen.send(outcome.value)
            else:
                cmd = self.gen.throw(outcome.error)
        except StopIteration as stop:
            return self._returned(stop.value)
        except Exception as exc:
            return self._fail(self._store_finalizers() or exc)
        if self.ctx.finalizers_stored != len(self.ctx.finalizers):
            mismatch = self._store_finalizers()
            if mismatch is not None:
                return self._fail(mismatch)
        if not isinstance(cmd, Command) or not self.runner.carries_out(cmd):
            self.gen.close()
            return self._fail(_not_a_command(cmd))
        self.ctx.mark_yielded(cmd)
        return cmd

    def _answer(self, at_yield: AtYield, cmd: Command[Any]) -> Outcome | str:
        """Answer a command that takes no step slot; the drive ends if the run ended here."""
        outcome = at_yield.carry_out(self.runner, cmd)
        if outcome is None:  # continued as new: ``drive.guarded`` sees to the next run
            self.gen.close()
            return _CONTINUED
        return outcome

    def _take_step(self, cmd: Command[Any], slot: str, resumed: bool = False) -> Outcome | str:
        """Replay the step at ``slot`` from its record, or carry it out: committed, parked,
        or refused at the yield."""
        try:
            if not resumed and self.history.updates_applied:
                updates.replay_applied(self.ctx, self.history, slot)
            record = self.history.ops.get(slot)
            if record is not None:
                return self.runner.replay(cmd, slot, record)
            done = self._carry_out(cmd, slot)
        except RaiseAtYield as raised:
            return Outcome(error=raised.error)
        except StorageLimitError as exc:  # refused before sending: nothing was written
            return Outcome(error=exc)
        except (
            NondeterminismError,
            ActivityReconciliationError,
            HistoryLimitExceededError,
        ) as exc:
            return self._fail(exc)
        if done is None:
            return self._park(cmd)
        return self._commit(cmd, slot, done)

    def _carry_out(self, cmd: Command[Any], slot: str) -> Done | None:
        """Carry the step out; where it parks with an update waiting, apply the update
        there and carry it on once more."""
        done = self.runner.advance(cmd, slot)
        if done is None and self.request.update is not None:
            updates.apply_incoming(self.rt, self.ctx, self.history, slot, self.request.update, cmd)
            self.request.update = None
            done = self.runner.advance(cmd, slot)
        return done

    def _commit(self, cmd: Command[Any], slot: str, done: Done) -> Outcome | str:
        """Commit a finished step; its outcome goes back to the code."""
        try:
            self.runner.commit_done(cmd, slot, done)
        except HistoryLimitExceededError as exc:
            return self._fail(exc)
        except StorageLimitError as exc:
            # The step's own writes cannot fit one atomic batch, now or on any retry:
            # raise at the yield, so the run fails with the reason instead of looping.
            return Outcome(error=exc)
        return done.outcome

    def _park(self, cmd: Command[Any]) -> str:
        """Keep the parked generator for this engine's next drive (see parked_runs)."""
        if self.history.wake is not None:  # parked without a write: drop the wake-up
            self.runner.commit_parking([], [])
        run = ParkedRun(
            self.gen,
            self.ctx,
            cmd,
            self.runner.step,
            self.runner.definition,
            self.history.replay_fingerprint(),
        )
        self.rt.parked.keep(self.ctx.workflow_id, run)
        return RUNNING

    def _store_finalizers(self) -> NondeterminismError | None:
        """Store what ``ctx.on_cancel`` registered since the generator last had control,
        before anything it did after is committed; a replay mismatch is returned to fail on."""
        if self.ctx.finalizers_stored == len(self.ctx.finalizers):
            return None
        try:
            finalizers.store_registered(self.rt, self.history, self.ctx)
        except NondeterminismError as exc:
            return exc
        return None

    def _returned(self, value: Any) -> str:
        """The code returned: the run completes, unless it made commands it never yielded."""
        forgotten = self.ctx.unyielded()
        if forgotten:
            return self._fail(CommandNotYieldedError([c.signature() for c in forgotten]))
        try:
            result = self.rt.encode_payload(value, "workflow result")
            transitions.finish(self.rt, self.history, COMPLETED, result, None)
        except (CodecError, PayloadTooLargeError, StorageLimitError) as exc:
            return self._fail(exc)
        _wake_parent(self.history, self.runner.enqueue)
        return COMPLETED

    def _fail(self, exc: BaseException) -> str:
        status = _fail(self.rt, self.history, exc)
        _wake_parent(self.history, self.runner.enqueue)
        return status


def _not_a_command(value: Any) -> InvalidArgumentError:
    if isinstance(value, Command):
        return InvalidArgumentError(
            f"the workflow yielded {type(value).__name__}, a Command the engine has no handler "
            "for; yield the engine's own commands (ctx.run(...), ctx.sleep(...) and the like), "
            "or wrap the work in an activity"
        )
    hint = (
        "; to call a helper generator use `yield from helper(ctx)`"
        if hasattr(value, "send") and hasattr(value, "throw")
        else ""
    )
    return InvalidArgumentError(
        f"the workflow yielded {type(value).__name__}, not a durable command; "
        f"yield ctx.run(...), ctx.sleep(...), ctx.wait_for_signal(...) and the like{hint}"
    )


def _fail(rt: Runtime, history: History, exc: BaseException) -> str:
    fields = (
        {"count": exc.count, "limit": exc.limit}
        if isinstance(exc, HistoryLimitExceededError)
        else {}
    )
    error = error_record("workflow", type(exc).__name__, str(exc), **fields)
    transitions.finish(rt, history, FAILED, None, error)
    logger.info("workflow %s failed: %s: %s", history.state.id, type(exc).__name__, exc)
    return FAILED


def _wake_parent(history: History, enqueue: Callable[[str], None]) -> None:
    parent = history.state.parent
    if parent and parent.get("await", True):
        enqueue(parent["id"])
