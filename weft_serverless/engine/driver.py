"""Drives one workflow generator: replay from the op log, carry out new steps, park or finish.

Recovery is positional memoised re-execution: the generator runs from the top and the
command yielded at step ``n`` is answered from op record ``n`` when it exists. Updates
recorded at step ``n`` are re-applied there first, so handler state is rebuilt in the same
order it was built live. Only past the recorded history does anything run for real.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.commands import Command, ContinueAsNew, GetVersion
from weft_serverless.context import WorkflowContext
from weft_serverless.errors import (
    ActivityReconciliationError,
    CodecError,
    CommandNotYieldedError,
    InvalidArgumentError,
    NondeterminismError,
    PayloadTooLargeError,
    StorageLimitError,
    VersionMismatchError,
)
from weft_serverless.errors_history import HistoryLimitExceededError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put
from weft_serverless.workflow import WorkflowDefinition

from . import continuation, finalizers, transitions, updates
from .commit import commit
from .outcomes import Outcome, RaiseAtYield
from .parked_runs import ParkedRun, close_parked
from .records import COMPLETED, FAILED, RUNNING, History, error_record, load_history
from .runtime import Runtime, logger
from .steps.runner import StepRunner
from .telemetry import RunFields, run_fields

# What a drive reports: a workflow status, or an ownership verdict when it did not drive.
RETAIN = "retain"
COLLECT = "collect"
BUSY = "busy"
DEPOSED = "deposed"
_CONTINUED = "continued"  # internal: the run continued as new (see ``drive``)


@dataclass(slots=True)
class DriveRequest:
    """What a drive should do besides advancing: deliver an update, or only replay (query)."""

    awaiting: set[str] = field(default_factory=set)
    update: updates.IncomingUpdate | None = None
    read_only: bool = False
    ctx: WorkflowContext | None = None
    seen: dict[str, Command[Any]] | None = None  # filled: the command yielded at each step


def drive(
    rt: Runtime,
    workflow_id: str,
    enqueue: Callable[[str], None],
    request: DriveRequest | None = None,
) -> str | None:
    """Advance a workflow as far as it can go now; returns its status afterwards (None: gone).

    In ``read_only`` mode nothing runs or is written: the generator is replayed up to the
    end of its recorded history and the context is left in ``request.ctx`` for a query.
    A run that continues as new is driven again by a later drive of its id (queued here),
    unless an update waits to be applied: then this drive carries the new run on to its
    first park point and applies the update there.
    """
    request = request or DriveRequest()
    with run_fields(workflow_id) as fields:
        while True:
            status = _drive_once(rt, workflow_id, enqueue, request, fields)
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
    history = load_history(rt.storage, workflow_id)
    if history is None or (history.state.status != RUNNING and not request.read_only):
        _drop_parked(rt, workflow_id)
        return None if history is None else history.state.status
    fields.workflow_type = history.state.type
    if not request.read_only:
        rt.fence.confirm_history(workflow_id, history)
        continuation.forget_earlier_runs(rt, history)
    definition = rt.definitions.get(history.state.type)
    if definition is None:
        # An engine with no workflows at all (an operator tool) only stores writes: routine.
        logger.log(
            logging.WARNING if rt.definitions else logging.INFO,
            "workflow %s has type %r, which this engine does not register; left as it is",
            workflow_id,
            history.state.type,
        )
        # Its timers stay for an engine that registers the type (a later deployment).
        return RETAIN if history.state.status == RUNNING else history.state.status
    if not definition.accepts_version(history.state.version) and not request.read_only:
        error = VersionMismatchError(workflow_id, history.state.version, definition.version)
        return _fail(rt, history, error)
    runner = StepRunner(rt, workflow_id, definition, history, enqueue)
    runner.awaiting = request.awaiting
    fields.step = lambda: keys.describe_slot(runner.slot) if runner.slot else None
    if rt.tracer is None or request.read_only:
        return _advance(rt, history, definition, runner, request)
    from .tracing import traceparent_of  # only with a tracer: no import cost without one

    state = history.state
    return rt.tracer.drive(
        workflow_id,
        traceparent_of(rt.tracer, state.extra, workflow_id, state.created_at),
        {"weft.workflow_id": workflow_id, "weft.workflow_type": state.type, "weft.run": state.run},
        lambda: _advance(rt, history, definition, runner, request),
    )


def _advance(
    rt: Runtime,
    history: History,
    definition: WorkflowDefinition,
    runner: StepRunner,
    request: DriveRequest,
) -> str | None:
    workflow_id = history.state.id
    warm = None if request.read_only else _warm(rt, history, definition)
    if warm is not None:
        request.ctx = warm.ctx
        return _Run(rt, history, warm.ctx, runner, warm.gen, request).loop(warm)
    ctx = WorkflowContext(workflow_id, definition, rt.now, rt.encode_payload)
    request.ctx = ctx
    try:
        gen = definition.fn(ctx, decode(history.state.input))
    except Exception as exc:
        return history.state.status if request.read_only else _fail(rt, history, exc)
    return _Run(rt, history, ctx, runner, gen, request).loop()


def _drop_parked(rt: Runtime, workflow_id: str) -> None:
    kept = rt.parked.take(workflow_id)
    if kept is not None:
        close_parked(kept.gen, workflow_id)


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
        self.loaded = history.top_level_steps()
        self.first = history.state.first_step  # step i of this run is at slot first + i

    def loop(self, warm: ParkedRun | None = None) -> str:
        """Run the generator from the top, or on from where ``warm`` left it parked."""
        step = 0 if warm is None else warm.step
        outcome = Outcome()
        started = warm is not None
        parked_on = None if warm is None else warm.cmd
        while True:
            if parked_on is not None:
                # Resumed warm: its updates are applied and the step is not recorded yet.
                cmd, parked_on = parked_on, None
                slot = keys.step_slot(self.first + step - 1)
                self.ctx.is_replaying = False
                resumed = True
            else:
                slot = keys.step_slot(self.first + step)
                self.ctx.is_replaying = slot in self.history.ops
                try:
                    if not started:
                        started = True
                        cmd = self.gen.send(None)
                    elif outcome.error is not None:
                        cmd = self.gen.throw(outcome.error)
                    else:
                        cmd = self.gen.send(outcome.value)
                except StopIteration as stop:
                    forgotten = self.ctx.unyielded()
                    if forgotten:
                        error = CommandNotYieldedError([c.signature() for c in forgotten])
                        return self._fail(error)
                    return self._complete(stop.value)
                except Exception as exc:
                    return self._fail(self._store_finalizers() or exc)
                if self.ctx.finalizers_stored != len(self.ctx.finalizers):
                    mismatch = self._store_finalizers()
                    if mismatch is not None:
                        return self._fail(mismatch)
                if isinstance(cmd, Command):
                    self.ctx.mark_yielded(cmd)
                if isinstance(cmd, GetVersion):
                    outcome = self._version(cmd, step)
                    continue
                if isinstance(cmd, ContinueAsNew):
                    continued = self._continue(cmd, step)
                    if isinstance(continued, str):
                        return continued
                    outcome = continued
                    continue
                if not isinstance(cmd, Command):
                    self.gen.close()
                    return self._fail(_not_a_command(cmd))
                step += 1
                resumed = False
            try:
                if self.request.seen is not None:
                    self.request.seen[slot] = cmd
                if not resumed and self.history.updates_applied:
                    updates.replay_applied(self.ctx, self.history, slot)
                record = self.history.ops.get(slot)
                if record is not None:
                    outcome = self.runner.replay(cmd, slot, record)
                    continue
                if self.request.read_only:
                    return self.history.state.status
                done = self.runner.advance(cmd, slot)
                if done is None and self.request.update is not None:
                    updates.apply_incoming(
                        self.rt, self.ctx, self.history, slot, self.request.update, cmd
                    )
                    self.request.update = None
                    done = self.runner.advance(cmd, slot)
            except RaiseAtYield as raised:
                outcome = Outcome(error=raised.error)
                continue
            except StorageLimitError as exc:  # refused before sending: nothing was written
                outcome = Outcome(error=exc)
                continue
            except (
                NondeterminismError,
                ActivityReconciliationError,
                HistoryLimitExceededError,
            ) as exc:
                return self._fail(exc)
            if done is None:
                if self.history.wake is not None:  # parked without a write: drop the wake-up
                    self.runner.commit_parking([], [])
                self._park(cmd, step)
                return RUNNING
            try:
                self.runner.commit_done(cmd, slot, done)
            except HistoryLimitExceededError as exc:
                return self._fail(exc)
            except StorageLimitError as exc:
                # The step's own writes cannot fit one atomic batch, now or on any retry:
                # raise at the yield, so the run fails with the reason instead of looping.
                outcome = Outcome(error=exc)
                continue
            outcome = done.outcome

    def _store_finalizers(self) -> NondeterminismError | None:
        """Store what ``ctx.on_cancel`` registered since the generator last had control,
        before anything it did after is committed; a replay mismatch is returned to fail on."""
        if self.request.read_only or self.ctx.finalizers_stored == len(self.ctx.finalizers):
            return None
        try:
            finalizers.store_registered(self.rt, self.history, self.ctx)
        except NondeterminismError as exc:
            return exc
        return None

    def _park(self, cmd: Command[Any], step: int) -> None:
        """Keep the parked generator for this engine's next drive (see parked_runs)."""
        run = ParkedRun(
            self.gen,
            self.ctx,
            cmd,
            step,
            self.runner.definition,
            self.history.replay_fingerprint(),
        )
        self.rt.parked.keep(self.ctx.workflow_id, run)

    def _version(self, cmd: GetVersion, step: int) -> Outcome:
        """Answer ``get_version`` without taking a step slot (see commands.GetVersion).

        A run that had already passed this point before the change was deployed gets
        ``min_supported``: it reaches it here while re-running code that ran before this
        drive, i.e. at or before the step it was parked on (``step <= self.loaded``).
        Only a run reaching it for the first time pins ``max_supported``, durably.
        """
        pinned = self.history.versions.get(cmd.change_id)
        if pinned is None:
            passed_before = 0 < step <= self.loaded
            if passed_before or self.request.read_only:
                return Outcome(cmd.min_supported if passed_before else cmd.max_supported)
            pinned = cmd.max_supported
            key = keys.version_key(self.ctx.workflow_id, cmd.change_id)
            ops: list[Op] = [Put(key, encode({"v": pinned}))]
            commit(self.rt, self.ctx.workflow_id, [Condition(key, None)], ops)
            self.history.note(ops)
            self.history.versions[cmd.change_id] = pinned
        if not cmd.min_supported <= pinned <= cmd.max_supported:
            return Outcome(
                error=VersionMismatchError(
                    self.ctx.workflow_id,
                    f"{cmd.change_id}={pinned}",
                    f"{cmd.change_id} in [{cmd.min_supported}, {cmd.max_supported}]",
                )
            )
        return Outcome(pinned)

    def _continue(self, cmd: ContinueAsNew, step: int) -> str | Outcome:
        """End this run and start the next one (engine/continuation.py); ``drive`` sees to
        the next run. A refusal is raised at the yield, nothing written."""
        if self.request.read_only:
            return self.history.state.status
        try:
            new_input = self.rt.encode_payload(cmd.input, "continue_as_new input")
            continuation.continue_as_new(
                self.rt, self.history, self.runner.definition, new_input, step
            )
        except (CodecError, PayloadTooLargeError, StorageLimitError, InvalidArgumentError) as exc:
            return Outcome(error=exc)
        self.gen.close()
        return _CONTINUED

    def _complete(self, value: Any) -> str:
        if self.request.read_only:
            return self.history.state.status
        try:
            result = self.rt.encode_payload(value, "workflow result")
            transitions.finish(self.rt, self.history, COMPLETED, result, None)
        except (CodecError, PayloadTooLargeError, StorageLimitError) as exc:
            return self._fail(exc)
        _wake_parent(self.history, self.runner.enqueue)
        return COMPLETED

    def _fail(self, exc: BaseException) -> str:
        if self.request.read_only:
            return self.history.state.status
        status = _fail(self.rt, self.history, exc)
        _wake_parent(self.history, self.runner.enqueue)
        return status


def _not_a_command(value: Any) -> InvalidArgumentError:
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
