"""Workflows an operator acts on while an application engine waits to finish them.

Each type ends waiting for the signal ``done``, which the application sends after an operator
action (console, CLI, any local caller of the API's operations) woke and drove the run: the
run then completes at once only if the operator's engine released its claim when the action
ended. ``--workflows operator_flows`` names this module to the CLI (the tests' directory is
on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

from weft_serverless import ActivityFailedError, Engine, RetryPolicy, current_activity, workflow

DONE = "done"
TOKENS: list[str] = []
"""The tokens the ``remote`` type's activity hands out, oldest first."""
FAILING: set[str] = set()
"""Inputs the ``flaky`` type's activity fails on (clear one and retry the run)."""

ONCE = RetryPolicy(max_attempts=1)


def _signalled(ctx: Any, _: Any) -> Any:
    first = yield ctx.wait_for_signal("first")
    done = yield ctx.wait_for_signal(DONE)
    return {"first": first, "done": done}


def _noted(ctx: Any, _: Any) -> Any:
    notes: list[Any] = []

    def note(text: Any) -> int:
        notes.append(text)
        return len(notes)

    ctx.on_update("note", note)
    done = yield ctx.wait_for_signal(DONE)
    return {"notes": notes, "done": done}


def _step(name: Any) -> Any:
    if name in FAILING:
        raise RuntimeError(f"{name} fails while it is in FAILING")
    return name


def _flaky(ctx: Any, name: Any) -> Any:
    stepped = yield ctx.run("step", name, retry=ONCE)
    done = yield ctx.wait_for_signal(DONE)
    return {"step": stepped, "done": done}


def _remote_step(_: Any) -> None:
    TOKENS.append(current_activity().complete_async())


def _remote(ctx: Any, _: Any) -> Any:
    try:
        answer = yield ctx.run("remote", None, retry=ONCE)
    except ActivityFailedError as exc:
        answer = {"failed": str(exc)}
    done = yield ctx.wait_for_signal(DONE)
    return {"remote": answer, "done": done}


def _parked(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal(DONE))


workflows = {
    "signalled": workflow("signalled").execute(_signalled),
    "noted": workflow("noted").execute(_noted),
    "flaky": workflow("flaky").activities(step=_step).execute(_flaky),
    "remote": workflow("remote").activities(remote=_remote_step).execute(_remote),
    "parked": workflow("parked").execute(_parked),
}


# -- runs ready for an operator's action, made by the application's engine -------------------


def waiting_for_first(app: Engine, run_id: str) -> str:
    """A ``signalled`` run parked on its ``first`` signal."""
    return _started(app, "signalled", run_id)


def waiting_for_a_note(app: Engine, run_id: str) -> str:
    """A ``noted`` run parked on ``done``, taking ``note`` updates meanwhile."""
    return _started(app, "noted", run_id)


def failed_on_its_step(app: Engine, run_id: str) -> str:
    """A ``flaky`` run failed on its step, which succeeds from now on (ready for a retry)."""
    FAILING.add(run_id)
    _started(app, "flaky", run_id, run_id)
    FAILING.discard(run_id)
    assert app.describe(run_id).status == "failed"
    return run_id


def suspended(app: Engine, run_id: str) -> str:
    """A ``parked`` run, suspended (ready for a resume)."""
    _started(app, "parked", run_id)
    with app.invocation():
        app.suspend(run_id)
    return run_id


def waiting_for_remote(app: Engine, run_id: str) -> str:
    """A ``remote`` run parked on its asynchronous activity; ``TOKENS[-1]`` finishes it."""
    return _started(app, "remote", run_id)


def _started(app: Engine, workflow_type: str, run_id: str, value: Any = None) -> str:
    with app.invocation():  # as the application's Lambda function starts it
        app.start(workflow_type, value, id=run_id)
    return run_id


def finishes_at_once(app: Engine, run_id: str) -> None:
    """The application's ``done`` signal completes the run now: no engine kept its claim."""
    owner = app.describe(run_id).owner
    assert owner is None or owner.get("engine_id") == app.runtime.engine_id, (
        f"the operator's engine still holds {run_id}: {owner}"
    )
    with app.invocation():
        app.signal(run_id, DONE, "now")
    assert app.describe(run_id).status == "completed"
