"""Bad definitions and bad values: typed ``WeftError``s with stable codes, nothing half-written."""

from __future__ import annotations

import collections
import datetime as dt
import enum
from typing import Any

import pytest
from engine_helpers import Opener, make_engine, op_signatures, workflow_keys

from weft_serverless import (
    CodecError,
    ConfigurationError,
    Engine,
    InvalidArgumentError,
    PayloadTooLargeError,
    RetryPolicy,
    UnknownWorkflowTypeError,
    WeftError,
    WorkflowBuilderError,
    WorkflowFailedError,
    codec,
    workflow,
)
from weft_serverless.testing import CrashingStorage, TestEngine


def _noop(value: Any = None) -> Any:
    return value


def _one_step(ctx: Any, value: Any) -> Any:
    return (yield ctx.run("a", value))


# -- the builder -----------------------------------------------------------------------------


def test_non_generator_workflow_is_refused() -> None:
    """A plain function or an async def is not a workflow; the message says how to write one."""

    def plain(ctx: Any, value: Any) -> Any:
        return value

    async def coroutine(ctx: Any, value: Any) -> Any:
        return value

    with pytest.raises(WorkflowBuilderError) as info:
        workflow("w").execute(plain)
    assert info.value.code == "WorkflowBuilderError"
    assert "not a generator" in str(info.value) and "yield ctx.run" in str(info.value)
    with pytest.raises(WorkflowBuilderError) as info:
        workflow("w").execute(coroutine)
    assert "async function" in str(info.value)


def test_activities_that_cannot_take_the_call_are_refused_at_build_time() -> None:
    """An activity is called with its one input (or with nothing when it has no positional
    parameter); one whose signature cannot take that is refused, every one listed at once."""

    def two_required(order: Any, amount: Any) -> Any:
        return order

    async def async_two(order: Any, amount: Any) -> Any:
        return order

    def keyword_required(*, region: str) -> str:
        return region

    class Callable2:
        def __call__(self, a: Any, b: Any) -> Any:
            return a

    with pytest.raises(WorkflowBuilderError) as info:
        workflow("w").activities(
            two=two_required, coro=async_two, kw=keyword_required, obj=Callable2(), ok=_noop
        ).execute(_one_step)
    assert [issue.split(" cannot")[0] for issue in info.value.issues] == [
        "activity 'two'",
        "activity 'coro'",
        "activity 'kw'",
        "activity 'obj'",
    ]
    assert "missing a required argument: 'amount'" in info.value.issues[0]
    assert "one dict or tuple" in info.value.issues[0]


def test_activities_of_every_callable_shape_that_can_take_the_call_are_accepted() -> None:
    """Defaults, ``*args``, ``**kwargs``, no parameters, async, bound methods and builtins."""

    class Service:
        def charge(self, order: Any) -> Any:
            return order

        def __call__(self, order: Any, retries: int = 3) -> Any:
            return order

    async def coro(value: Any) -> Any:
        return value

    definition = (
        workflow("w")
        .activities(
            defaults=lambda a, b=1: a,
            star=lambda *args: args,
            kwargs=lambda value, **extra: value,
            nothing=lambda: 1,
            coro=coro,
            method=Service().charge,
            obj=Service(),
            builtin=len,
        )
        .execute(_one_step)
    )
    assert len(definition.activities) == 8


def test_duplicate_activities_call_is_refused() -> None:
    """``.activities()`` may be given once."""
    with pytest.raises(WorkflowBuilderError) as info:
        workflow("w").activities(a=_noop).activities(b=_noop).execute(_one_step)
    assert info.value.issues == [".activities() may be called only once"]


def test_duplicate_execute_call_is_refused() -> None:
    """A builder produces one definition; a second ``.execute()`` raises."""
    builder = workflow("w").activities(a=_noop)
    builder.execute(_one_step)
    with pytest.raises(WorkflowBuilderError) as info:
        builder.execute(_one_step)
    assert ".execute() may be called only once" in info.value.issues


def test_every_builder_problem_is_reported_at_once() -> None:
    """Bad name, bad version, non-callable and generator activities: all issues in one error."""

    def gen_activity(x: Any) -> Any:
        yield x

    with pytest.raises(WorkflowBuilderError) as info:
        workflow("", version="").activities(a=42, b=gen_activity).execute(_one_step)  # type: ignore[arg-type]
    issues = info.value.issues
    assert len(issues) == 4, issues
    assert any("name" in issue for issue in issues)
    assert any("version" in issue for issue in issues)
    assert any("'a' is not callable" in issue for issue in issues)
    assert any("'b' is a generator" in issue for issue in issues)
    assert isinstance(info.value, ConfigurationError)


@pytest.mark.parametrize(
    ("workflows", "fragment"),
    [
        ({"w": "not a definition"}, "not a WorkflowDefinition"),
        ({"other": workflow("w").activities(a=_noop).execute(_one_step)}, "key must equal"),
        (["w"], "mapping"),
    ],
    ids=["not-a-definition", "key-mismatch", "not-a-mapping"],
)
def test_engine_refuses_a_bad_registry(
    storage_factory: Opener, workflows: Any, fragment: str
) -> None:
    """``Engine.create`` checks the registry and says what is wrong."""
    with pytest.raises(ConfigurationError) as info:
        Engine.create(storage_factory(), workflows, background_tasks="manual")
    assert info.value.code == "ConfigurationError"
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "options",
    [
        {"background_tasks": "sometimes"},
        {"background_tasks": "manual", "ownership": "everyone"},
        {"background_tasks": "manual", "max_payload_bytes": 0},
    ],
    ids=["background-tasks", "ownership", "payload-limit"],
)
def test_engine_refuses_bad_options(storage_factory: Opener, options: dict[str, Any]) -> None:
    """Bad engine options raise ConfigurationError before anything runs."""
    with pytest.raises(ConfigurationError):
        Engine.create(storage_factory(), {}, **options)


def test_unknown_activity_fails_the_run_naming_it(storage_factory: Opener) -> None:
    """``ctx.run`` of an undeclared activity fails the run with UnknownActivityError, naming the
    activity and the declared ones."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("missing", 1))

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    handle = te.start("w", id="w")
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    assert info.value.error_type == "UnknownActivityError"
    assert "'missing'" in info.value.error_message
    assert "declared: a" in info.value.error_message
    assert op_signatures(te.storage, "w") == []


def test_undeclared_function_reference_is_an_unknown_activity(storage_factory: Opener) -> None:
    """Passing a function that was not declared fails the same way, naming the function."""

    def stray(x: Any) -> Any:
        return x

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run(stray, 1))

    te = make_engine(storage_factory, {"w": workflow("w").execute(body)})
    with pytest.raises(WorkflowFailedError) as info:
        te.start("w", id="w").result()
    assert info.value.error_type == "UnknownActivityError"
    assert "'stray'" in info.value.error_message and "declared: none" in info.value.error_message


def test_unknown_workflow_type_is_refused_without_writing(storage_factory: Opener) -> None:
    """Starting an unregistered type raises UnknownWorkflowTypeError and writes nothing."""
    store = CrashingStorage(storage_factory())
    te = TestEngine({}, storage=store)
    with pytest.raises(UnknownWorkflowTypeError) as info:
        te.start("ghost", id="g")
    assert info.value.code == "UnknownWorkflowTypeError"
    assert "'ghost'" in str(info.value)
    assert store.writes == 0


@pytest.mark.parametrize(
    "body",
    [
        lambda ctx: ctx.run("a", 1, retry="3 times"),
        lambda ctx: ctx.run("a", 1, timeout=0),
        lambda ctx: ctx.run("a", 1, timeout="soon"),
        lambda ctx: ctx.wait_for_signal(""),
        lambda ctx: ctx.wait_for_signal("go", timeout="-1s"),
        lambda ctx: ctx.all(),
        lambda ctx: ctx.all(ctx.run("a", 1), "not a command"),
        lambda ctx: ctx.race(ctx.now()),
        lambda ctx: ctx.start_child(""),
        lambda ctx: ctx.start_child("w", id=""),
        lambda ctx: ctx.memo("", lambda: 1),
        lambda ctx: ctx.memo("k", 42),
    ],
    ids=[
        "retry-not-policy",
        "zero-timeout",
        "bad-timeout",
        "empty-signal-name",
        "negative-wait-timeout",
        "empty-all",
        "all-non-command",
        "race-record",
        "empty-child-type",
        "empty-child-id",
        "empty-memo-key",
        "memo-not-callable",
    ],
)
def test_bad_context_arguments_fail_the_run_with_invalid_argument(
    storage_factory: Opener, body: Any
) -> None:
    """A bad argument to a ctx method raises InvalidArgumentError at that line: the run fails
    with it and records no step."""

    def wf(ctx: Any, _: Any) -> Any:
        return (yield body(ctx))

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(wf)})
    with pytest.raises(WorkflowFailedError) as info:
        te.start("w", id="w").result()
    assert info.value.error_type == "InvalidArgumentError"
    assert op_signatures(te.storage, "w") == []


def test_yielding_a_non_command_fails_with_a_hint(storage_factory: Opener) -> None:
    """Yielding a helper generator (instead of ``yield from``) fails the run with a hint."""

    def helper(ctx: Any) -> Any:
        return (yield ctx.run("a", 1))

    def wrong(ctx: Any, _: Any) -> Any:
        return (yield helper(ctx))

    def number(ctx: Any, _: Any) -> Any:
        return (yield 5)

    te = make_engine(
        storage_factory,
        {
            "wrong": workflow("wrong").activities(a=_noop).execute(wrong),
            "number": workflow("number").execute(number),
        },
    )
    with pytest.raises(WorkflowFailedError) as info:
        te.start("wrong", id="w").result()
    assert info.value.error_type == "InvalidArgumentError"
    assert "yield from helper(ctx)" in info.value.error_message
    with pytest.raises(WorkflowFailedError) as info:
        te.start("number", id="n").result()
    assert "yielded int, not a durable command" in info.value.error_message


def test_a_command_subclass_the_engine_has_no_handler_for_fails_the_run(
    storage_factory: Opener,
) -> None:
    """A ``Command`` subclass of the user's own is not a durable operation the engine can
    carry out: the run fails with a typed error naming it, as any other non-command yield
    does, instead of a bare ``TypeError`` escaping the drive."""
    from weft_serverless.commands import Command

    class Homemade(Command[int]):
        def signature(self) -> str:
            return "homemade"

    def homemade(ctx: Any, _: Any) -> Any:
        return (yield Homemade())

    te = make_engine(storage_factory, {"homemade": workflow("homemade").execute(homemade)})
    with pytest.raises(WorkflowFailedError) as info:
        te.start("homemade", id="h").result()
    assert info.value.error_type == "InvalidArgumentError"
    assert "Homemade" in info.value.error_message
    assert "no handler" in info.value.error_message


def test_a_command_never_yielded_fails_the_run_naming_it(storage_factory: Opener) -> None:
    """``ctx.run("a", x)`` without ``yield`` does not run, so the run fails instead of
    completing without it; the error names the command, and the yielded step still ran."""

    def forgot(ctx: Any, value: Any) -> Any:
        ctx.run("a", value)
        yield ctx.run("b", value)
        ctx.sleep(5)
        return "done"

    te = make_engine(
        storage_factory, {"forgot": workflow("forgot").activities(a=_noop, b=_noop).execute(forgot)}
    )
    a, b = te.mock("a"), te.mock("b")
    with pytest.raises(WorkflowFailedError) as info:
        te.start("forgot", 1, id="f").result()
    assert info.value.error_type == "CommandNotYieldedError"
    assert "run:a, sleep" in info.value.error_message
    assert "never yielded" in info.value.error_message
    assert (a.calls, b.calls) == ([], [1])
    assert op_signatures(te.storage, "f") == ["run:b"]


def test_commands_yielded_inside_all_race_or_from_count_as_yielded(
    storage_factory: Opener,
) -> None:
    """Branches of ``ctx.all``/``ctx.race`` (losers included), ``yield from`` and saga
    compensations that never had to run are not "forgotten"."""

    def composed(ctx: Any, value: Any) -> Any:
        saga = ctx.saga()
        yield from saga.run("a", value, compensate="b")
        saga.add_compensation("b", 2)
        both = yield ctx.all(ctx.run("a", 1), ctx.run("a", 2))
        first = yield ctx.race(ctx.run("a", 3), ctx.sleep(60))
        last = yield from ctx.run("a", 4)
        return [both, first, last]

    te = make_engine(
        storage_factory,
        {"composed": workflow("composed").activities(a=_noop, b=_noop).execute(composed)},
    )
    assert te.start("composed", 0, id="c").result() == [[1, 2], (0, 3), 4]


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("start", {"workflow_type": "w", "id": ""}),
        ("start", {"workflow_type": "w", "id": "x" * 257}),
        ("start", {"workflow_type": "w", "id": "bad\nid"}),
        ("start", {"workflow_type": "w", "id": 5}),
        ("start", {"workflow_type": "w", "id": "ok", "idempotency_key": ""}),
        ("describe", {"workflow_id": ""}),
        ("cancel", {"workflow_id": "x" * 300}),
        ("get_handle", {"workflow_id": None}),
    ],
    ids=[
        "empty-id",
        "long-id",
        "control-char-id",
        "int-id",
        "empty-idempotency-key",
        "describe-empty",
        "cancel-long",
        "handle-none",
    ],
)
def test_bad_ids_and_keys_are_refused_without_writing(
    storage_factory: Opener, call: str, args: dict[str, Any]
) -> None:
    """Bad ids and keys raise InvalidArgumentError (code stable) and write nothing."""
    store = CrashingStorage(storage_factory())
    te = TestEngine({"w": workflow("w").activities(a=_noop).execute(_one_step)}, storage=store)
    with pytest.raises(InvalidArgumentError) as info:
        getattr(te.engine, call)(**args)
    assert info.value.code == "InvalidArgumentError"
    assert isinstance(info.value, WeftError)
    assert store.writes == 0


# -- codec -----------------------------------------------------------------------------------


class Opaque:
    pass


def test_unencodable_input_names_the_path_and_writes_nothing(storage_factory: Opener) -> None:
    """A start input the codec refuses raises CodecError naming the path; nothing is written."""
    store = CrashingStorage(storage_factory())
    te = TestEngine({"w": workflow("w").activities(a=_noop).execute(_one_step)}, storage=store)
    with pytest.raises(CodecError) as info:
        te.start("w", {"items": [1, Opaque()]}, id="w")
    assert info.value.code == "CodecError"
    assert info.value.path == "workflow input['items'][1]"
    assert "Opaque" in str(info.value)
    assert store.writes == 0
    assert te.list() == []


class _Level(enum.IntEnum):
    LOW = 1


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "path", "says"),
    [
        ({"level": _Level.LOW}, "workflow input['level']", "subclass of int"),
        ({"o": collections.OrderedDict(a=1)}, "workflow input['o']", "subclass of dict"),
        ({"name": "bad\ud800"}, "workflow input['name']", "lone surrogate"),
        ({"bad\udfff": 1}, "workflow input key 'bad\\udfff'", "lone surrogate"),
        (_nested(100_000), "workflow input" + "[0]" * codec.MAX_DEPTH, "deeper than 128"),
    ],
    ids=["int-enum", "ordered-dict", "surrogate-value", "surrogate-key", "deep-nesting"],
)
def test_documented_refusals_are_codec_errors_and_write_nothing(
    storage_factory: Opener, value: Any, path: str, says: str
) -> None:
    """Subclasses of supported types, lone surrogates and deep nesting raise CodecError at the
    call (never a silent conversion, UnicodeEncodeError or RecursionError); nothing is written."""
    store = CrashingStorage(storage_factory())
    te = TestEngine({"w": workflow("w").activities(a=_noop).execute(_one_step)}, storage=store)
    with pytest.raises(CodecError) as info:
        te.start("w", value, id="w")
    assert info.value.path == path
    assert says in str(info.value)
    assert store.writes == 0


def test_nesting_at_the_limit_round_trips(storage_factory: Opener) -> None:
    """A value nested exactly MAX_DEPTH deep (tuples recurse in Python) is kept and replayed."""
    deep: Any = ()
    for _ in range(codec.MAX_DEPTH - 1):
        deep = (deep,)
    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(_one_step)})
    assert te.start("w", deep, id="w").result() == deep


def test_unencodable_signal_payload_is_refused_without_writing(storage_factory: Opener) -> None:
    """A signal payload the codec refuses raises CodecError naming the path; nothing written."""

    def waiter(ctx: Any, _: Any) -> Any:
        return (yield ctx.wait_for_signal("go"))

    store = CrashingStorage(storage_factory())
    te = TestEngine({"w": workflow("w").execute(waiter)}, storage=store)
    te.start("w", id="w")
    writes = store.writes
    with pytest.raises(CodecError) as info:
        te.signal("w", "go", {"when": Opaque()})
    assert "['when']" in info.value.path
    assert store.writes == writes


def test_unencodable_activity_input_is_raised_at_the_yield(storage_factory: Opener) -> None:
    """A ``ctx.run`` input the codec refuses raises CodecError in the workflow, before the
    activity runs or anything is recorded; the workflow may handle it."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.run("a", [Opaque()])
        except CodecError as exc:
            return exc.path
        return "unreachable"

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    a = te.mock("a")
    assert te.start("w", id="w").result() == "input of activity 'a'[0]"
    assert a.call_count == 0
    assert op_signatures(te.storage, "w") == []


def test_unencodable_activity_result_fails_without_retry(storage_factory: Opener) -> None:
    """An activity returning an unencodable value fails with CodecError at once, not retried."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("a", retry=RetryPolicy(max_attempts=5)))

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    a = te.mock("a", returns={"obj": Opaque()})
    with pytest.raises(WorkflowFailedError) as info:
        te.start("w", id="w").result()
    assert "CodecError" in info.value.error_message
    assert "['obj']" in info.value.error_message
    assert a.call_count == 1


def test_unencodable_workflow_result_fails_the_run(storage_factory: Opener) -> None:
    """A workflow returning an unencodable value fails with CodecError naming the path."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.run("a", 1)
        return {"x": Opaque()}

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    with pytest.raises(WorkflowFailedError) as info:
        te.start("w", id="w").result()
    assert info.value.error_type == "CodecError"
    assert "workflow result['x']" in info.value.error_message


def test_codec_types_round_trip_through_every_crossing(storage_factory: Opener) -> None:
    """Tuples, datetimes, Decimals, sets, UUIDs, bytes survive input, activity, signal, result,
    and a restart."""
    import decimal
    import uuid

    value = {
        "tuple": (1, "two"),
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "day": dt.date(2026, 1, 2),
        "span": dt.timedelta(seconds=90),
        "amount": decimal.Decimal("12.30"),
        "tags": {"a", "b"},
        "frozen": frozenset({1, 2}),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "raw": b"\x00\xff",
        "big": 2**63,
    }

    def body(ctx: Any, data: Any) -> Any:
        echoed = yield ctx.run("a", data)
        signalled = yield ctx.wait_for_signal("go")
        return [data, echoed, signalled]

    te = make_engine(storage_factory, {"w": workflow("w").activities(a=_noop).execute(body)})
    te.mock("a", impl=lambda x: x)
    te.start("w", value, id="w")
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "go", value)
    assert te.get_handle("w").result() == [value, value, value]


# -- payload limit ---------------------------------------------------------------------------

LIMIT = 1024
BIG = "x" * 2000


def limited(storage_factory: Opener, body: Any, store: Any = None) -> TestEngine:
    return TestEngine(
        {"w": workflow("w").activities(a=_noop).execute(body)},
        storage=store if store is not None else storage_factory(),
        max_payload_bytes=LIMIT,
    )


def test_oversized_input_is_refused_before_anything_is_written(storage_factory: Opener) -> None:
    """PayloadTooLargeError names the value and both sizes; the store is untouched."""
    store = CrashingStorage(storage_factory())
    te = limited(storage_factory, _one_step, store)
    with pytest.raises(PayloadTooLargeError) as info:
        te.start("w", BIG, id="w")
    error = info.value
    assert error.code == "PayloadTooLargeError"
    assert (error.what, error.limit) == ("workflow input", LIMIT)
    assert error.size > LIMIT
    assert store.writes == 0
    assert workflow_keys(store, "w") == []


def test_oversized_signal_is_refused_before_anything_is_written(storage_factory: Opener) -> None:
    """An oversized signal payload raises and writes nothing; the run still waits."""

    def waiter(ctx: Any, _: Any) -> Any:
        return (yield ctx.wait_for_signal("go"))

    store = CrashingStorage(storage_factory())
    te = limited(storage_factory, waiter, store)
    handle = te.start("w", id="w")
    writes = store.writes
    with pytest.raises(PayloadTooLargeError):
        te.signal("w", "go", BIG)
    assert store.writes == writes
    te.signal("w", "go", "small")
    assert handle.result() == "small"


def test_oversized_activity_input_is_raised_at_the_yield(storage_factory: Opener) -> None:
    """An oversized ``ctx.run`` input is thrown into the workflow; the activity never runs."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.run("a", BIG)
        except PayloadTooLargeError as exc:
            return exc.what
        return "unreachable"

    te = limited(storage_factory, body)
    a = te.mock("a")
    assert te.start("w", id="w").result() == "input of activity 'a'"
    assert a.call_count == 0


def test_oversized_activity_result_fails_without_retry(storage_factory: Opener) -> None:
    """An oversized activity result fails that step at once (never retried)."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("a", retry=RetryPolicy(max_attempts=5)))

    te = limited(storage_factory, body)
    a = te.mock("a", returns=BIG)
    with pytest.raises(WorkflowFailedError) as info:
        te.start("w", id="w").result()
    assert info.value.error_type == "ActivityFailedError"
    assert "PayloadTooLargeError" in info.value.error_message
    assert "1 attempt(s)" in info.value.error_message
    assert a.call_count == 1


def test_oversized_workflow_result_fails_the_run(storage_factory: Opener) -> None:
    """A result over the limit fails the run with PayloadTooLargeError."""

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.run("a", 1)
        return BIG

    te = limited(storage_factory, body)
    with pytest.raises(WorkflowFailedError) as info:
        te.start("w", id="w").result()
    assert info.value.error_type == "PayloadTooLargeError"
    assert "workflow result" in info.value.error_message


def test_oversized_recorded_value_is_raised_at_the_yield(storage_factory: Opener) -> None:
    """``ctx.memo`` of an oversized value raises at its yield and records nothing."""

    def body(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.memo("big", lambda: BIG)
        except PayloadTooLargeError:
            return "refused"
        return "unreachable"

    te = limited(storage_factory, body)
    assert te.start("w", id="w").result() == "refused"
    assert op_signatures(te.storage, "w") == []


def test_payload_at_the_limit_is_accepted(storage_factory: Opener) -> None:
    """A value exactly at the limit passes; the limit is inclusive."""
    from weft_serverless.codec import encode

    te = limited(storage_factory, _one_step)
    te.mock("a", impl=lambda x: len(x))
    text = "y" * (LIMIT - len(encode("")) - 2)
    while len(encode(text)) < LIMIT:
        text += "y"
    assert len(encode(text)) == LIMIT
    assert te.start("w", text, id="w").result() == len(text)


@pytest.mark.parametrize("where", ["activity", "workflow"])
def test_oversized_error_message_still_fails_the_run_cleanly(
    storage_factory: Opener, where: str
) -> None:
    """A huge exception message (from an activity or the workflow) is cut to fit: the run
    fails with the original error type and the start of its message, nothing escapes start()."""
    store = storage_factory()
    huge = "x" * (store.capabilities().max_value_bytes + 1)

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.run("a", retry=RetryPolicy(max_attempts=1))
        raise ValueError(huge)

    te = TestEngine({"w": workflow("w").activities(a=_noop).execute(body)}, storage=store)
    te.mock("a", raises=ValueError(huge) if where == "activity" else None)
    escaped = None
    try:
        te.start("w", id="w")
    except WeftError as exc:  # kept short: the chained error carries the huge message
        escaped = f"start() raised {exc.code}: {str(exc)[:200]}"
    assert escaped is None, escaped
    description = te.describe("w")
    assert description.status == "failed"
    assert description.error is not None
    expected = "ActivityFailedError" if where == "activity" else "ValueError"
    assert description.error["type"] == expected
    message = description.error["message"]
    assert "xxxxxxxxxx" in message[:200]
    assert len(message) < len(huge)


def _infinite(ctx: Any, kind: str) -> Any:
    if kind == "sleep":
        yield ctx.sleep(float("inf"))
    else:
        yield ctx.wait_for_signal("x", timeout=float("inf"))
    return "unreachable"


@pytest.mark.parametrize("kind", ["sleep", "wait-timeout"])
def test_infinite_duration_fails_the_run_and_cannot_poison_recovery(
    storage_factory: Opener, kind: str
) -> None:
    """``float('inf')`` as a duration is an InvalidArgumentError that fails the run; a new
    engine on the same store still starts."""
    te = make_engine(storage_factory, {"w": workflow("w").execute(_infinite)})
    escaped = None
    try:
        te.start("w", kind, id="w")
    except Exception as exc:
        escaped = f"start() raised {type(exc).__name__}: {exc}"
    assert escaped is None, escaped
    description = te.describe("w")
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "InvalidArgumentError"
    te.crash()
    te.recover(storage=storage_factory())  # a fresh engine (recover=True) must come up
