"""The programming model: yield forms, activities, durable values, quiet replay, failures."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from engine_helpers import T0, Opener, advance_to, make_engine, op_signatures

from weft_serverless import ActivityFailedError, RetryPolicy, WorkflowFailedError, workflow


def _noop(value: Any = None) -> Any:
    return value


def _child(ctx: Any, value: Any) -> Any:
    return (yield ctx.run("a", value))


def _with_yield(ctx: Any, value: Any) -> Any:
    a = yield ctx.run("a", value)
    yield ctx.sleep("1s")
    s = yield ctx.wait_for_signal("go")
    both = yield ctx.all(ctx.run("a", 1), ctx.run("a", 2))
    won = yield ctx.race(ctx.run("a", 3), ctx.sleep("1h"))
    kid = yield ctx.start_child("child", 4)
    memo = yield ctx.memo("m", lambda: "memo")
    now = yield ctx.now()
    return [a, s, both, won, kid, memo, now]


def _with_yield_from(ctx: Any, value: Any) -> Any:
    a = yield from ctx.run("a", value)
    yield from ctx.sleep("1s")
    s = yield from ctx.wait_for_signal("go")
    both = yield from ctx.all(ctx.run("a", 1), ctx.run("a", 2))
    won = yield from ctx.race(ctx.run("a", 3), ctx.sleep("1h"))
    kid = yield from ctx.start_child("child", 4)
    memo = yield from ctx.memo("m", lambda: "memo")
    now = yield from ctx.now()
    return [a, s, both, won, kid, memo, now]


FORMS = {
    "child": workflow("child").activities(a=_noop).execute(_child),
    "plain": workflow("plain").activities(a=_noop).execute(_with_yield),
    "delegating": workflow("delegating").activities(a=_noop).execute(_with_yield_from),
}


@pytest.mark.parametrize("form", ["plain", "delegating"])
def test_both_yield_forms_give_the_same_values_and_steps(
    storage_factory: Opener, form: str
) -> None:
    """``x = yield cmd`` and ``x = yield from cmd`` behave alike for every command kind."""
    te = make_engine(storage_factory, FORMS)
    te.mock("a", impl=lambda x: f"a({x})")
    handle = te.start(form, 0, id="w")
    advance_to(te, T0 + 1)
    te.signal("w", "go", "sig")
    assert handle.result() == [
        "a(0)",
        "sig",
        ["a(1)", "a(2)"],
        (0, "a(3)"),
        "a(4)",
        "memo",
        T0 + 1,
    ]
    assert op_signatures(te.storage, "w") == [
        "run:a",
        "sleep",
        "signal:go",
        "all(run:a,run:a)",
        "race(run:a,sleep)",
        "child:child",
        "memo:m",
        "now",
    ]


def test_helper_generators_compose_with_yield_from(storage_factory: Opener) -> None:
    """A helper generator called with ``yield from`` contributes its steps and its return value,
    and replays like inline code after a crash."""

    def charge(ctx: Any, amount: int) -> Any:
        receipt = yield ctx.run("a", amount)
        yield ctx.sleep("5s")
        return receipt.upper()

    def body(ctx: Any, _: Any) -> Any:
        first = yield from charge(ctx, 1)
        second = yield from charge(ctx, 2)
        return [first, second]

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    a = te.mock("a", impl=lambda x: f"r{x}")
    te.start("w", id="w")
    advance_to(te, T0 + 5)
    te.crash()
    te.recover(storage=storage_factory())
    advance_to(te, T0 + 10)
    assert te.get_handle("w").result() == ["R1", "R2"]
    assert a.calls == [1, 2]
    assert op_signatures(te.storage, "w") == ["run:a", "sleep", "run:a", "sleep"]


def test_activity_forms_by_name_reference_no_input_and_async(storage_factory: Opener) -> None:
    """Activities run by name or by function, with or without an input, sync or async."""
    seen: list[Any] = []

    def double(x: int) -> int:
        seen.append(("double", x))
        return x * 2

    def ping() -> str:
        seen.append(("ping",))
        return "pong"

    async def fetch(x: str) -> str:
        seen.append(("fetch", x))
        return f"got {x}"

    def body(ctx: Any, value: int) -> Any:
        by_name = yield ctx.run("double", value)
        by_ref = yield ctx.run(double, by_name)
        no_input = yield ctx.run("ping")
        awaited = yield ctx.run(fetch, "page")
        return [by_name, by_ref, no_input, awaited]

    definition = workflow("w").activities(double=double, ping=ping, fetch=fetch).execute(body)
    te = make_engine(storage_factory, {"w": definition})
    assert te.start("w", 3, id="w").result() == [6, 12, "pong", "got page"]
    assert seen == [("double", 3), ("double", 6), ("ping",), ("fetch", "page")]
    assert op_signatures(te.storage, "w") == ["run:double", "run:double", "run:ping", "run:fetch"]


def test_plain_workflow_without_steps_completes(storage_factory: Opener) -> None:
    """A generator that returns before yielding completes with its value and no step."""

    def body(ctx: Any, value: Any) -> Any:
        if value is not None:
            return {"echo": value}
        yield ctx.sleep(1)  # pragma: no cover - not reached

    te = make_engine(storage_factory, {"w": workflow("w").execute(body)})
    assert te.start("w", [1, 2], id="w").result() == {"echo": [1, 2]}
    assert op_signatures(te.storage, "w") == []


def test_durable_values_are_recorded_once_across_a_crash(storage_factory: Opener) -> None:
    """now, uuid, random and memo keep the values first recorded after a restart and later
    replays; the memo function runs once."""
    memo_calls: list[int] = []

    def compute() -> dict[str, int]:
        memo_calls.append(1)
        return {"n": len(memo_calls)}

    def body(ctx: Any, _: Any) -> Any:
        now = yield ctx.now()
        ident = yield ctx.uuid()
        rnd = yield ctx.random()
        memo = yield ctx.memo("config", compute)
        yield ctx.run("observe", [now, ident, rnd, memo])
        yield ctx.wait_for_signal("go")
        later = yield ctx.now()
        return [now, ident, rnd, memo, later]

    te = make_engine(storage_factory, {"w": workflow("w").activities(observe=_noop).execute(body)})
    observe = te.mock("observe")
    te.start("w", id="w")
    assert len(observe.calls) == 1
    first = observe.calls[0]
    assert first[0] == T0
    assert isinstance(first[1], str) and len(first[1]) == 36
    assert 0 <= first[2] < 1
    assert first[3] == {"n": 1}

    te.clock.advance(500)
    te.crash()
    te.recover(storage=storage_factory())
    te.clock.advance(500)
    te.signal("w", "go")
    assert te.get_handle("w").result() == [*first, T0 + 1000]
    assert memo_calls == [1]
    assert observe.call_count == 1


def test_log_is_silent_at_recorded_steps_while_replaying(
    storage_factory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """Lines logged before recorded steps are not repeated by later drives or recovery; lines
    past the history are logged. (As in Weft, a line after the last committed step may be
    emitted again when the run is next driven: that is allowed, not pinned.)"""

    def body(ctx: Any, _: Any) -> Any:
        ctx.log.info("start")
        yield ctx.run("a", 1)
        ctx.log.info("after a")
        yield ctx.sleep("1s")
        ctx.log.info("after sleep")
        yield ctx.run("a", 2)
        ctx.log.info("after second a")
        yield ctx.wait_for_signal("go")
        ctx.log.info("done")
        return "ok"

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "weft_serverless.workflow"]

    caplog.set_level(logging.INFO, logger="weft_serverless.workflow")
    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    te.start("w", id="w")
    assert lines() == ["start", "after a"]

    caplog.clear()
    advance_to(te, T0 + 1)  # replays run:a and the sleep, then runs on
    assert "start" not in lines()
    assert lines()[-2:] == ["after sleep", "after second a"]

    caplog.clear()
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "go")
    assert te.get_handle("w").result() == "ok"
    assert not {"start", "after a", "after sleep"} & set(lines())
    assert lines()[-1] == "done"
    record = next(r for r in caplog.records if r.getMessage() == "done")
    assert getattr(record, "workflow_id", None) == "w"


def test_workflow_exception_fails_the_run_with_its_type_and_message(
    storage_factory: Opener,
) -> None:
    """An exception escaping the generator fails the run; ``result()`` raises
    WorkflowFailedError carrying the original type and message."""

    class InsufficientFunds(Exception):
        pass

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.run("a", 1)
        raise InsufficientFunds("balance 3 < 5")

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    handle = te.start("w", id="w")
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    assert (info.value.error_type, info.value.error_message) == (
        "InsufficientFunds",
        "balance 3 < 5",
    )
    assert te.describe("w").status == "failed"


def test_activity_failure_is_catchable_and_the_run_goes_on(storage_factory: Opener) -> None:
    """ActivityFailedError reaches the workflow at the yield with the activity, type, message
    and attempts; after handling it the workflow continues, also on replay."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.run("bad", retry=RetryPolicy(max_attempts=1))
        except ActivityFailedError as exc:
            caught = [exc.activity, exc.error_type, exc.error_message, exc.attempts]
        yield ctx.wait_for_signal("go")
        compensation = yield ctx.run("a", "undo")
        return [caught, compensation]

    te = make_engine(
        storage_factory, {"w": workflow("w").activities(a=_noop, bad=_noop).execute(body)}
    )
    bad = te.mock("bad", raises=KeyError("sku"))
    te.mock("a", impl=lambda x: x)
    te.start("w", id="w")
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "go")
    assert te.get_handle("w").result() == [["bad", "KeyError", "'sku'", 1], "undo"]
    assert bad.call_count == 1


def test_workflow_input_defaults_to_none(storage_factory: Opener) -> None:
    """A start without input passes None to the generator."""

    def body(ctx: Any, value: Any) -> Any:
        return (yield ctx.run("a", value))

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    te.mock("a", impl=lambda x: {"got": x})
    assert te.start("w", id="w").result() == {"got": None}
