"""The bodies of the workload's commands: what a ``sim`` run yields for each program entry.

Each body takes ``(ctx, state, step, arg)``: ``state`` is the run's memory (its values,
signals and approvals, carried over a ``continue_as_new``), ``step`` the entry's index in
the whole program (so step numbers, activity tags and child ids stay unique across the runs
of one id). ``expect`` gives the values a body appends to ``state["values"]`` when it
completes, for the check that a finished run's result is what its program computes whatever
order its branches finished in (``ANY`` matches a value the workload cannot foresee).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from weft_serverless.commands import RetryPolicy

Gen = Generator[Any, Any, Any]
RETRY_TWICE = RetryPolicy(max_attempts=3, initial_backoff=1.0, max_backoff=4.0)
ONCE = RetryPolicy(max_attempts=1)
FINALIZER_RETRY = RetryPolicy(max_attempts=2, initial_backoff=1.0)
HEARTBEAT_TIMEOUT = 2.0
"""The ``heartbeat_timeout`` of ``beat``: a hung attempt is given up after it."""
ANY = "<any>"
"""In an expected result: any value."""


def value_of(workflow_id: str, step: int, tag: str) -> str:
    return f"{workflow_id}/{step}/{tag}"


def work(ctx: Any, step: int, tag: str, **extra: Any) -> dict[str, Any]:
    return {"wf": ctx.workflow_id, "step": step, "tag": tag, **extra}


def act(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["values"].append((yield ctx.run("work", work(ctx, step, "a"))))


def flaky(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["values"].append(
        (yield ctx.run("work", work(ctx, step, "f", fail_first=True), retry=RETRY_TWICE))
    )


def fatal(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.run("work", work(ctx, step, "x", fail_always=True), retry=ONCE)


def sleep(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.sleep(arg)


def signal(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["sigs"].append((yield ctx.wait_for_signal("go")))


def signal_timeout(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    value = yield ctx.wait_for_signal("go", timeout=arg)
    if value is not None:
        state["sigs"].append(value)


def update(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    wanted = state["updates_passed"] + 1
    yield ctx.wait_until(lambda: state["approved"] >= wanted)
    state["updates_passed"] = wanted


def child(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    policy, prog, kind = arg
    child_id = f"{ctx.workflow_id}.c{step}"
    spec = {"prog": prog, "ck": "a"}
    yield ctx.start_child(kind, spec, id=child_id, parent_close_policy=policy)


def all_of(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    branches = [ctx.run("work", work(ctx, step, f"b{n}")) for n in range(arg)]
    state["values"].append((yield ctx.all(*branches)))


def map_of(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    count, bound = arg
    items = [work(ctx, step, f"m{n}", bound=bound) for n in range(count)]
    state["values"].append((yield ctx.map("work", items, max_concurrency=bound)))


def nested(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    """Composites inside a composite: an ``all`` of an ``all``, or of a ``race`` between an
    activity and a sleep."""
    inner: Any
    if arg == "all":
        inner = ctx.all(
            ctx.run("work", work(ctx, step, "n0")), ctx.run("work", work(ctx, step, "n1"))
        )
    else:
        inner = ctx.race(ctx.run("work", work(ctx, step, "n0")), ctx.sleep(5.0))
    first, second = yield ctx.all(inner, ctx.run("work", work(ctx, step, "n2")))
    state["values"].append([first, second])


def race(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    index, value = yield ctx.race(ctx.sleep(arg), ctx.wait_for_signal("go"))
    if index == 1:
        state["sigs"].append(value)


def race_activity(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    """An activity racing a sleep: with branches together the sleep parks first, and the
    activity wins (unless time moves on meanwhile) and takes the sleep's timer with it."""
    yield ctx.race(ctx.run("work", work(ctx, step, "r")), ctx.sleep(arg))


def saga(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    def body(saga: Any) -> Gen:
        yield from saga.run("work", work(ctx, step, "s1"), compensate="undo", retry=ONCE)
        extra = {"fail_always": True} if arg == "fail" else {}
        yield from saga.run("work", work(ctx, step, "s2", **extra), compensate="undo", retry=ONCE)

    yield from ctx.saga().execute(body)


def ask(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    state["values"].append((yield ctx.run("ask", work(ctx, step, "q"))))


def idempotent(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    key = f"{ctx.workflow_id}/{step}"
    state["values"].append((yield ctx.run("charge", work(ctx, step, "i"), idempotency_key=key)))


def now(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.now()


def beat(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    """An activity that heartbeats, and may hang: only its heartbeat timeout ends it then."""
    value = yield ctx.run(
        "beat", work(ctx, step, "h"), heartbeat_timeout=HEARTBEAT_TIMEOUT, retry=RETRY_TWICE
    )
    state["values"].append(value)


def upsert(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    yield ctx.upsert_search_attributes({"stage": arg})


def finalizer(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    """Register a finalizer (not yielded: it is stored before the run's next step)."""
    pos = state["finalizers"]
    state["finalizers"] += 1
    cleanup = {"wf": ctx.workflow_id, "run": state["run"], "pos": pos, "mode": arg}
    ctx.on_cancel("cleanup", cleanup, retry=FINALIZER_RETRY)
    return
    yield  # a generator that yields nothing


def continue_as_new(ctx: Any, state: dict[str, Any], step: int, arg: Any) -> Gen:
    """Start this id again at the next entry, carrying what the run has seen so far (a
    signal buffered and not consumed yet is the next run's to consume)."""
    carry = {
        "values": state["values"],
        "sigs": state["sigs"],
        "approved": state["approved"],
        "updates_passed": state["updates_passed"],
        "run": state["run"] + 1,
    }
    yield ctx.continue_as_new({**state["spec"], "at": step + 1, "carry": carry})


def _one(tag: str) -> Callable[[str, int, Any], list[Any]]:
    return lambda wf, step, arg: [value_of(wf, step, tag)]


def _none(wf: str, step: int, arg: Any) -> list[Any]:
    return []


def _all(wf: str, step: int, arg: Any) -> list[Any]:
    return [[value_of(wf, step, f"b{n}") for n in range(arg)]]


def _map(wf: str, step: int, arg: Any) -> list[Any]:
    return [[value_of(wf, step, f"m{n}") for n in range(arg[0])]]


def _nested(wf: str, step: int, arg: Any) -> list[Any]:
    last = value_of(wf, step, "n2")
    if arg == "all":
        return [[[value_of(wf, step, "n0"), value_of(wf, step, "n1")], last]]
    return [[ANY, last]]


def _ask(wf: str, step: int, arg: Any) -> list[Any]:
    return [f"answer:{wf}/{step}"]


EXPECT: dict[str, Callable[[str, int, Any], list[Any]]] = {
    "act": _one("a"),
    "flaky": _one("f"),
    "all": _all,
    "map": _map,
    "nest": _nested,
    "async": _ask,
    "idempotent": _one("i"),
    "beat": _one("h"),
}
"""What each value-producing command appends (every other command appends nothing)."""


def expected(wf: str, program: list[list[Any]]) -> list[Any]:
    """The values a run that completed ``program`` returns."""
    values: list[Any] = []
    for step, (name, arg) in enumerate(program):
        values += EXPECT.get(name, _none)(wf, step, arg)
    return values


def matches(have: Any, want: Any) -> bool:
    """``have`` equals ``want`` (tuples as lists), ``ANY`` in ``want`` matching anything."""
    if want == ANY:
        return True
    if isinstance(want, list | tuple):
        return (
            isinstance(have, list | tuple)
            and len(have) == len(want)
            and all(matches(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)
