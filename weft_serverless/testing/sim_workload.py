"""The simulation's workload: one workflow that runs a program drawn from the ``COMMANDS`` table.

A program is a list of ``[command, arg]`` pairs. Each table entry says how to yield the
command inside the workflow, how likely it is, and whether a run parked on it at quiescence
is legitimately waiting (for something the workload never supplied) or is stuck. Adding a
command the engine grows is one entry here.

Activities report every execution to the ``Observer`` (the simulator), which counts runs per
attempt, hands out async tokens and may stall or crash the engine inside the activity.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from weft_serverless.activity import Verification, activity, current_activity
from weft_serverless.commands import RetryPolicy
from weft_serverless.workflow import WorkflowDefinition, workflow

Gen = Generator[Any, Any, Any]
WORKFLOW = "sim"
RETIRED = "retired"
RETRY_TWICE = RetryPolicy(max_attempts=3, initial_backoff=1.0, max_backoff=4.0)
ONCE = RetryPolicy(max_attempts=1)


class Observer(Protocol):
    """What the activities tell the simulator, and what it tells the liveness check."""

    def activity_ran(self, workflow_id: str, step: int, tag: str, attempt: int) -> None: ...

    def async_token(self, workflow_id: str, step: int, token: str) -> None: ...

    def ledger(self) -> dict[str, Any]: ...

    def signals_sent(self, workflow_id: str) -> int: ...

    def updates_applied(self, workflow_id: str) -> int: ...

    def token_completed(self, workflow_id: str, step: int) -> bool: ...

    def child_live(self, child_id: str) -> bool: ...


class SimFailure(Exception):
    """The failure an activity of the workload raises on purpose."""


@dataclass(frozen=True)
class Where:
    """Where a run is, as its own ``where`` query answers after replaying its history."""

    step: int
    signals: int  # signal waits it has passed
    updates: int  # update waits it has passed


@dataclass(frozen=True)
class CommandSpec:
    """One workload command: its weight, how to draw its arg, the workflow body, and
    whether being parked on it at quiescence is a legitimate wait (``parked_ok``)."""

    weight: float
    arg: Callable[[random.Random], Any]
    body: Callable[[Any, dict[str, Any], int, Any], Gen]
    parked_ok: Callable[[Observer, str, Where, Any], bool]


def _never(_obs: Observer, _wf: str, _where: Where, _arg: Any) -> bool:
    return False


def _work(ctx: Any, step: int, tag: str, **extra: Any) -> dict[str, Any]:
    return {"wf": ctx.workflow_id, "step": step, "tag": tag, **extra}


def _act(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["values"].append((yield ctx.run("work", _work(ctx, step, "a"))))


def _flaky(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["values"].append(
        (yield ctx.run("work", _work(ctx, step, "f", fail_first=True), retry=RETRY_TWICE))
    )


def _fatal(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.run("work", _work(ctx, step, "x", fail_always=True), retry=ONCE)


def _sleep(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.sleep(arg)


def _signal(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["sigs"].append((yield ctx.wait_for_signal("go")))


def _signal_parked_ok(obs: Observer, wf: str, where: Where, _arg: Any) -> bool:
    return obs.signals_sent(wf) <= where.signals


def _signal_timeout(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    value = yield ctx.wait_for_signal("go", timeout=arg)
    if value is not None:
        state["sigs"].append(value)


def _update(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    wanted = state["updates_passed"] + 1
    yield ctx.wait_until(lambda: state["approved"] >= wanted)
    state["updates_passed"] = wanted


def _update_parked_ok(obs: Observer, wf: str, where: Where, _arg: Any) -> bool:
    return obs.updates_applied(wf) <= where.updates


def _child(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    policy, prog = arg
    child_id = f"{ctx.workflow_id}.c{step}"
    yield ctx.start_child(WORKFLOW, {"prog": prog}, id=child_id, parent_close_policy=policy)


def _child_arg(rng: random.Random) -> list[Any]:
    """A close policy and the child's own short program (children start no children)."""
    prog = [[name, COMMANDS[name].arg(rng)] for name in rng.sample(CHILD_COMMANDS, 2)]
    return [rng.choice(["await", "abandon", "request-cancel"]), prog]


def _child_parked_ok(obs: Observer, wf: str, where: Where, arg: Any) -> bool:
    return arg[0] == "await" and obs.child_live(f"{wf}.c{where.step}")


def _all(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    left, right = yield ctx.all(
        ctx.run("work", _work(ctx, step, "l")), ctx.run("work", _work(ctx, step, "r"))
    )
    state["values"].append([left, right])


def _race(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    index, value = yield ctx.race(ctx.sleep(arg), ctx.wait_for_signal("go"))
    if index == 1:
        state["sigs"].append(value)


def _saga(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    def body(saga: Any) -> Gen:
        yield from saga.run("work", _work(ctx, step, "s1"), compensate="undo", retry=ONCE)
        extra = {"fail_always": True} if arg == "fail" else {}
        yield from saga.run("work", _work(ctx, step, "s2", **extra), compensate="undo", retry=ONCE)

    yield from ctx.saga().execute(body)


def _async(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["values"].append((yield ctx.run("ask", _work(ctx, step, "q"))))


def _async_parked_ok(obs: Observer, wf: str, where: Where, _arg: Any) -> bool:
    return not obs.token_completed(wf, where.step)


def _idempotent(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    key = f"{ctx.workflow_id}/{step}"
    state["values"].append((yield ctx.run("charge", _work(ctx, step, "i"), idempotency_key=key)))


def _now(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.now()


def _none(_rng: random.Random) -> Any:
    return None


def _seconds(low: float, high: float) -> Callable[[random.Random], float]:
    return lambda rng: round(rng.uniform(low, high), 1)


COMMANDS: dict[str, CommandSpec] = {
    "act": CommandSpec(4, _none, _act, _never),
    "flaky": CommandSpec(1.5, _none, _flaky, _never),
    "fatal": CommandSpec(0.4, _none, _fatal, _never),
    "sleep": CommandSpec(2, _seconds(0.5, 8.0), _sleep, _never),
    "signal": CommandSpec(1.5, _none, _signal, _signal_parked_ok),
    "signal-timeout": CommandSpec(1, _seconds(1.0, 6.0), _signal_timeout, _never),
    "update": CommandSpec(1, _none, _update, _update_parked_ok),
    "child": CommandSpec(1, _child_arg, _child, _child_parked_ok),
    "all": CommandSpec(1, _none, _all, _never),
    "race": CommandSpec(1, _seconds(1.0, 6.0), _race, _never),
    "saga": CommandSpec(0.7, lambda rng: rng.choice(["ok", "fail"]), _saga, _never),
    "async": CommandSpec(1, _none, _async, _async_parked_ok),
    "idempotent": CommandSpec(1, _none, _idempotent, _never),
    "now": CommandSpec(0.5, _none, _now, _never),
}
"""Every command the workload draws from: name -> spec. A new engine command is one entry."""


CHILD_COMMANDS = ["act", "sleep", "signal", "flaky", "update"]

CHILD_AFTER_UPDATE_ON = True
"""Whether a program may start a child after an update wait (on: a child start always has a
wake-up, and the update call drives the child it lets the parent start)."""


def random_program(rng: random.Random, length: int) -> list[list[Any]]:
    names = list(COMMANDS)
    weights = [COMMANDS[name].weight for name in names]
    program: list[list[Any]] = []
    for _ in range(length):
        name = rng.choices(names, weights)[0]
        if name == "child" and not CHILD_AFTER_UPDATE_ON and ["update", None] in program:
            name = "act"
        program.append([name, COMMANDS[name].arg(rng)])
    return program


def value_of(workflow_id: str, step: int, tag: str) -> str:
    return f"{workflow_id}/{step}/{tag}"


def sim_workflow(ctx: Any, spec: dict[str, Any]) -> Gen:
    """Run ``spec["prog"]``; the ``where`` query reports progress for the liveness check."""
    state: dict[str, Any] = {
        "step": 0,
        "values": [],
        "sigs": [],
        "approved": 0,
        "updates_passed": 0,
    }

    def approve(payload: Any) -> int:
        state["approved"] += 1
        return int(state["approved"])

    def validate(payload: Any) -> None:
        if not isinstance(payload, int) or payload < 0:
            raise ValueError("an approval is a non-negative int")

    ctx.on_update("approve", approve, validator=validate)
    ctx.on_query(
        "where",
        lambda _: {
            "step": state["step"],
            "signals": len(state["sigs"]),
            "updates": state["updates_passed"],
            "result": {"values": state["values"], "sigs": state["sigs"]},
        },
    )
    for step, (name, arg) in enumerate(spec["prog"]):
        state["step"] = step
        yield from COMMANDS[name].body(ctx, state, step, arg)
    state["step"] = len(spec["prog"])
    return {"values": state["values"], "sigs": state["sigs"]}


def _retired(ctx: Any, _input: Any) -> Gen:
    yield ctx.sleep(1.0)


def retired_workflow() -> dict[str, WorkflowDefinition]:
    """A type only an old deploy knows: its runs' timers can never fire on today's engines."""
    return {RETIRED: workflow(RETIRED).execute(_retired)}


def build_workflows(obs: Observer) -> dict[str, WorkflowDefinition]:
    """The one workflow type, its activities bound to the simulator that observes them."""

    def work(arg: dict[str, Any]) -> str:
        attempt = current_activity().attempt
        obs.activity_ran(arg["wf"], arg["step"], arg["tag"], attempt)
        if arg.get("fail_always") or (arg.get("fail_first") and attempt == 1):
            raise SimFailure(f"planned failure of {arg['wf']} step {arg['step']}")
        return value_of(arg["wf"], arg["step"], arg["tag"])

    def undo(_arg: Any) -> None:
        return None

    def ask(arg: dict[str, Any]) -> None:
        attempt = current_activity().attempt
        obs.activity_ran(arg["wf"], arg["step"], arg["tag"], attempt)
        obs.async_token(arg["wf"], arg["step"], current_activity().complete_async())

    def charge(arg: dict[str, Any]) -> str:
        attempt = current_activity().attempt
        obs.activity_ran(arg["wf"], arg["step"], arg["tag"], attempt)
        value = value_of(arg["wf"], arg["step"], arg["tag"])
        obs.ledger()[f"{arg['wf']}/{arg['step']}"] = value
        return value

    def verify(arg: dict[str, Any], _key: str) -> Verification:
        value = obs.ledger().get(f"{arg['wf']}/{arg['step']}")
        return Verification.not_completed() if value is None else Verification.completed(value)

    definition = (
        workflow(WORKFLOW)
        .activities(work=work, undo=undo, ask=ask, charge=activity(charge, verify=verify))
        .execute(sim_workflow)
    )
    return {WORKFLOW: definition}
