"""The simulation's workload: runs of programs drawn from the ``COMMANDS`` table.

A program is a list of ``[command, arg]`` pairs. Each table entry says how likely it is, how
to draw its argument, how the workflow yields it (``sim_commands``), and whether a run parked
on it at quiescence is legitimately waiting (for something the workload never supplied) or is
stuck. Adding a command the engine grows is one entry here.

Three workflow types run the same program: ``sim`` with no limit, ``simq`` limited per
concurrency key with a queue, ``simr`` limited with rejection. Every type declares two search
attributes (``stage``, ``region``). Activities report every execution to the ``Observer``
(the simulator), which counts runs per attempt, hands out async tokens, and may stall, crash
or hang the engine inside the activity.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from weft_serverless.activity import Verification, activity, current_activity
from weft_serverless.concurrency import Concurrency
from weft_serverless.testing import sim_commands as cmd
from weft_serverless.testing.sim_commands import Gen, value_of
from weft_serverless.workflow import WorkflowDefinition, workflow

WORKFLOW = "sim"
QUEUED = "simq"
REJECTING = "simr"
TYPES = (WORKFLOW, QUEUED, REJECTING)
RETIRED = "retired"
LIMITS = {QUEUED: 2, REJECTING: 1}
"""Runs of a limited type active at once per concurrency key (``ck`` of the input)."""
ATTRIBUTES = {"stage": int, "region": str}


class Observer(Protocol):
    """What the activities tell the simulator, and what it tells the liveness check."""

    def activity_ran(self, workflow_id: str, step: int, tag: str, attempt: int) -> None: ...

    def async_token(self, workflow_id: str, step: int, token: str) -> None: ...

    def ledger(self) -> dict[str, Any]: ...

    def signals_sent(self, workflow_id: str) -> int: ...

    def updates_applied(self, workflow_id: str) -> int: ...

    def token_completed(self, workflow_id: str, step: int) -> bool: ...

    def child_live(self, child_id: str) -> bool: ...

    def child_pending(self, child_id: str) -> bool: ...

    def beat(self, workflow_id: str, step: int, attempt: int, seen: Any) -> None: ...

    def hang(self, workflow_id: str, step: int, attempt: int) -> None: ...

    def finalized(self, arg: dict[str, Any], attempt: int) -> None: ...

    def bounded(self, bound: int, what: str) -> None: ...


class SimFailure(Exception):
    """The failure an activity of the workload raises on purpose."""


@dataclass(frozen=True)
class Where:
    """Where a run is, as its own ``where`` query answers after replaying its history."""

    step: int
    signals: int  # signal waits it has passed (over every run of its id)
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


def _signal_parked_ok(obs: Observer, wf: str, where: Where, _arg: Any) -> bool:
    return obs.signals_sent(wf) <= where.signals


def _update_parked_ok(obs: Observer, wf: str, where: Where, _arg: Any) -> bool:
    return obs.updates_applied(wf) <= where.updates


def _child_parked_ok(obs: Observer, wf: str, where: Where, arg: Any) -> bool:
    """An awaited child still running, or any child not started yet (queued for a slot):
    the step gives a non-awaited child's id once it has started."""
    child = f"{wf}.c{where.step}"
    return (arg[0] == "await" and obs.child_live(child)) or obs.child_pending(child)


def _async_parked_ok(obs: Observer, wf: str, where: Where, _arg: Any) -> bool:
    return not obs.token_completed(wf, where.step)


def _none(_rng: random.Random) -> Any:
    return None


def _seconds(low: float, high: float) -> Callable[[random.Random], float]:
    return lambda rng: round(rng.uniform(low, high), 1)


def _child_arg(rng: random.Random, depth: int = 0) -> list[Any]:
    """A close policy, the child's own short program (a child may start a child of its
    own: children two levels deep), and its type (sometimes one queued per key)."""
    names = CHILD_COMMANDS + (["child"] if depth == 0 else [])
    prog = [_entry(rng, name, depth + 1) for name in rng.sample(names, 2)]
    kind = QUEUED if rng.random() < 0.2 else WORKFLOW
    return _fit_continue([rng.choice(["await", "abandon", "request-cancel"]), prog, kind])


def _fit_continue(arg: list[Any]) -> list[Any]:
    """A child whose program continues as new leaves no request-cancel child open."""
    arg[1] = fit_continue(arg[1])
    return arg


def fit_continue(program: list[list[Any]]) -> list[list[Any]]:
    """A program that continues as new starts no request-cancel child (an open one would
    refuse the continue): those become ``abandon``."""
    if any(name == "continue" for name, _ in program):
        return [_no_open_child(entry) for entry in program]
    return program


def _no_open_child(entry: list[Any]) -> list[Any]:
    name, arg = entry
    if name == "child" and arg[0] == "request-cancel":
        return [name, ["abandon", *arg[1:]]]
    return entry


COMMANDS: dict[str, CommandSpec] = {
    "act": CommandSpec(4, _none, cmd.act, _never),
    "flaky": CommandSpec(1.5, _none, cmd.flaky, _never),
    "fatal": CommandSpec(0.4, _none, cmd.fatal, _never),
    "sleep": CommandSpec(2, _seconds(0.5, 8.0), cmd.sleep, _never),
    "signal": CommandSpec(1.5, _none, cmd.signal, _signal_parked_ok),
    "signal-timeout": CommandSpec(1, _seconds(1.0, 6.0), cmd.signal_timeout, _never),
    "update": CommandSpec(1, _none, cmd.update, _update_parked_ok),
    "child": CommandSpec(1, _child_arg, cmd.child, _child_parked_ok),
    "all": CommandSpec(1.2, lambda rng: rng.choice([2, 2, 3]), cmd.all_of, _never),
    "map": CommandSpec(0.8, lambda rng: [rng.randint(2, 4), rng.randint(1, 2)], cmd.map_of, _never),
    "nest": CommandSpec(0.6, lambda rng: rng.choice(["all", "race"]), cmd.nested, _never),
    "race": CommandSpec(1, _seconds(1.0, 6.0), cmd.race, _never),
    "race-act": CommandSpec(0.8, _seconds(2.0, 8.0), cmd.race_activity, _never),
    "saga": CommandSpec(0.7, lambda rng: rng.choice(["ok", "fail"]), cmd.saga, _never),
    "async": CommandSpec(1, _none, cmd.ask, _async_parked_ok),
    "idempotent": CommandSpec(1, _none, cmd.idempotent, _never),
    "now": CommandSpec(0.3, _none, cmd.now, _never),
    "beat": CommandSpec(0.8, _none, cmd.beat, _never),
    "upsert": CommandSpec(0.6, lambda rng: rng.randrange(4), cmd.upsert, _never),
    "finalizer": CommandSpec(
        0.8, lambda rng: rng.choice(["ok", "ok", "flaky", "dead"]), cmd.finalizer, _never
    ),
    "continue": CommandSpec(0.5, _none, cmd.continue_as_new, _never),
}
"""Every command the workload draws from: name -> spec. A new engine command is one entry."""


CHILD_COMMANDS = ["act", "sleep", "signal", "flaky", "update", "finalizer", "continue", "all"]

CHILD_AFTER_UPDATE_ON = True
"""Whether a program may start a child after an update wait (on: a child start always has a
wake-up, and the update call drives the child it lets the parent start)."""


def _entry(rng: random.Random, name: str, depth: int = 0) -> list[Any]:
    return [name, _child_arg(rng, depth) if name == "child" else COMMANDS[name].arg(rng)]


def random_program(rng: random.Random, length: int) -> list[list[Any]]:
    names = list(COMMANDS)
    weights = [COMMANDS[name].weight for name in names]
    program: list[list[Any]] = []
    for _ in range(length):
        name = rng.choices(names, weights)[0]
        if name == "child" and not CHILD_AFTER_UPDATE_ON and ["update", None] in program:
            name = "act"
        program.append(_entry(rng, name))
    return fit_continue(program)


def sim_workflow(ctx: Any, spec: dict[str, Any]) -> Gen:
    """Run ``spec["prog"]`` from entry ``spec["at"]`` (past a ``continue_as_new``) with what
    earlier runs of the id carried; the ``where`` query reports progress."""
    carry = spec.get("carry") or {}
    state: dict[str, Any] = {
        "spec": {k: v for k, v in spec.items() if k not in ("at", "carry")},
        "step": 0,
        "values": list(carry.get("values", [])),
        "sigs": list(carry.get("sigs", [])),
        "approved": carry.get("approved", 0),
        "updates_passed": carry.get("updates_passed", 0),
        "run": carry.get("run", 1),
        "finalizers": 0,
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
            "approved": state["approved"],
            "result": {"values": state["values"], "sigs": state["sigs"]},
        },
    )
    program = spec["prog"]
    for step in range(spec.get("at", 0), len(program)):
        name, arg = program[step]
        state["step"] = step
        yield from COMMANDS[name].body(ctx, state, step, arg)
    state["step"] = len(program)
    return {"values": state["values"], "sigs": state["sigs"]}


def _retired(ctx: Any, _input: Any) -> Gen:
    yield ctx.sleep(1.0)


def retired_workflow() -> dict[str, WorkflowDefinition]:
    """A type only an old deploy knows: its runs' timers can never fire on today's engines."""
    return {RETIRED: workflow(RETIRED).execute(_retired)}


def _concurrency(kind: str) -> Concurrency | None:
    if kind not in LIMITS:
        return None

    def key(spec: dict[str, Any]) -> str:
        return str(spec.get("ck", ""))

    if kind == QUEUED:
        return Concurrency(LIMITS[kind], key=key, on_limit="queue")
    return Concurrency(LIMITS[kind], key=key, on_limit="reject")


def build_workflows(obs: Observer) -> dict[str, WorkflowDefinition]:
    """The workflow types, their activities bound to the simulator that observes them."""

    def work(arg: dict[str, Any]) -> str:
        attempt = current_activity().attempt
        obs.activity_ran(arg["wf"], arg["step"], arg["tag"], attempt)
        if "bound" in arg:
            obs.bounded(arg["bound"], f"{arg['wf']} step {arg['step']}")
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

    def beat(arg: dict[str, Any]) -> str:
        act = current_activity()
        obs.activity_ran(arg["wf"], arg["step"], arg["tag"], act.attempt)
        obs.beat(arg["wf"], arg["step"], act.attempt, act.heartbeat_details)
        for n in range(2):
            act.heartbeat(f"{act.attempt}.{n}")
        obs.hang(arg["wf"], arg["step"], act.attempt)
        return value_of(arg["wf"], arg["step"], arg["tag"])

    def cleanup(arg: dict[str, Any]) -> None:
        attempt = current_activity().attempt
        obs.finalized(arg, attempt)
        if arg["mode"] == "dead" or (arg["mode"] == "flaky" and attempt == 1):
            raise SimFailure(f"planned failure of finalizer {arg['pos']} of {arg['wf']}")

    activities: dict[str, Any] = {
        "work": work,
        "undo": undo,
        "ask": ask,
        "charge": activity(charge, verify=verify),
        "beat": beat,
        "cleanup": cleanup,
    }
    return {
        kind: workflow(kind, concurrency=_concurrency(kind), search_attributes=ATTRIBUTES)
        .activities(**activities)
        .execute(sim_workflow)
        for kind in TYPES
    }
