"""Drives one workflow generator: replay from the op log, carry out new steps, park or finish.

Recovery is positional memoised re-execution: the generator runs from the top and the
command yielded at step ``n`` is answered from op record ``n`` when it exists. Only past the
recorded history does anything run for real.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.commands import Command
from weft_serverless.context import WorkflowContext
from weft_serverless.errors import (
    CodecError,
    InvalidArgumentError,
    NondeterminismError,
    PayloadTooLargeError,
)
from weft_serverless.storage import keys

from . import lifecycle
from .records import COMPLETED, FAILED, RUNNING, History, error_record, load_history
from .runtime import Runtime, logger
from .steps import Outcome, RaiseAtYield, StepRunner


def drive(
    rt: Runtime, workflow_id: str, enqueue: Callable[[str], None], awaiting: set[str]
) -> str | None:
    """Advance a workflow as far as it can go now; returns its status afterwards (None: gone).

    ``awaiting`` receives the names of the signals the workflow parked on.
    """
    history = load_history(rt.storage, workflow_id)
    if history is None:
        return None
    if history.state.status != RUNNING:
        return history.state.status
    definition = rt.definitions.get(history.state.type)
    if definition is None:
        logger.warning(
            "workflow %s has type %r, which this engine does not register; left as it is",
            workflow_id,
            history.state.type,
        )
        return history.state.status
    ctx = WorkflowContext(workflow_id, definition, rt.now)
    runner = StepRunner(rt, workflow_id, definition, history, enqueue)
    runner.awaiting = awaiting
    try:
        gen = definition.fn(ctx, decode(history.state.input))
    except Exception as exc:
        return _fail(rt, history, exc)
    return _run(rt, history, ctx, runner, gen)


def _run(rt: Runtime, history: History, ctx: WorkflowContext, runner: StepRunner, gen: Any) -> str:
    step = 0
    outcome = Outcome()
    started = False
    while True:
        slot = keys.step_slot(step)
        ctx.is_replaying = slot in history.ops
        try:
            if not started:
                started = True
                cmd = gen.send(None)
            elif outcome.error is not None:
                cmd = gen.throw(outcome.error)
            else:
                cmd = gen.send(outcome.value)
        except StopIteration as stop:
            return _complete(rt, history, stop.value)
        except Exception as exc:
            return _fail(rt, history, exc)
        if not isinstance(cmd, Command):
            gen.close()
            return _fail(rt, history, _not_a_command(cmd))
        step += 1
        record = history.ops.get(slot)
        try:
            if record is not None:
                outcome = runner.replay(cmd, slot, record)
                continue
            done = runner.advance(cmd, slot)
        except RaiseAtYield as raised:
            outcome = Outcome(error=raised.error)
            continue
        except NondeterminismError as exc:
            return _fail(rt, history, exc)
        if done is None:
            return RUNNING
        runner.commit_done(cmd, slot, done)
        outcome = done.outcome


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


def _complete(rt: Runtime, history: History, value: Any) -> str:
    try:
        result = rt.encode_payload(value, "workflow result")
    except (CodecError, PayloadTooLargeError) as exc:
        return _fail(rt, history, exc)
    lifecycle.finish(rt, history, COMPLETED, result, None)
    return COMPLETED


def _fail(rt: Runtime, history: History, exc: BaseException) -> str:
    error = error_record("workflow", type(exc).__name__, str(exc))
    lifecycle.finish(rt, history, FAILED, None, error)
    logger.info("workflow %s failed: %s: %s", history.state.id, type(exc).__name__, exc)
    return FAILED
