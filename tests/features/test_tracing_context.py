"""The trace tree a backend receives from the real OpenTelemetry SDK: what an activity traces
nests under its attempt on every thread and task it may run on, the run's sampling decision
is taken once at its start and honoured by every drive on any engine, no span names a parent
nobody exported, and a span is always ended whatever escapes.

Tracing does not depend on the storage backend: these run on memory and SQLite (a restart
reopens the file).
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest
from feature_support import Opener, make_engine, recover_fresh
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased
from opentelemetry.trace import StatusCode
from tracing_support import Spans, attribute, instrumented_call, sampled, stored_trace

from weft_serverless import RetryPolicy, workflow

pytestmark = pytest.mark.backends("memory", "sqlite")

TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
"""A context variable of the application's, set around the call that drives the run."""


class Abort(BaseException):
    """Escapes an activity the way ``KeyboardInterrupt`` or ``SystemExit`` would."""


def _calling(spans: Spans, seen: dict[str, Any]) -> Any:
    """An activity making an instrumented call, noting the call's span id and the context
    it ran in, by the value it was given."""

    def call(key: str) -> str:
        seen[key] = {
            "span": instrumented_call(spans.provider, f"GET /{key}"),
            "tenant": TENANT.get(),
            "baggage": baggage.get_baggage("tenant"),
            "thread": threading.get_ident(),
        }
        return key

    return call


def _parent_attempt(spans: Spans, span_id: int) -> Any:
    [inner] = [s for s in spans.all if s.context.span_id == span_id]
    return spans.parent_of(inner)


@pytest.mark.parametrize("watched", [False, True], ids=["inline", "on-a-thread"])
def test_a_call_inside_a_sequential_activity_is_a_child_of_its_attempt(
    storage_factory: Opener, watched: bool
) -> None:
    spans, seen = Spans.new(), {}

    def body(ctx: Any, _: Any) -> Any:
        # a timeout makes the drive watch the attempt from another thread
        return (yield ctx.run("call", "one", timeout="1h" if watched else None))

    flows = {"seq": workflow("seq").activities(call=_calling(spans, seen)).execute(body)}
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    token = TENANT.set("acme")
    try:
        assert te.start("seq", id="s").result() == "one"
    finally:
        TENANT.reset(token)

    [attempt] = spans.named("weft activity call")
    assert _parent_attempt(spans, seen["one"]["span"]) is attempt
    assert seen["one"]["tenant"] == "acme"  # the drive's context, on whichever thread
    assert (seen["one"]["thread"] == threading.get_ident()) is not watched
    assert spans.dangling() == []


def test_calls_inside_parallel_branches_are_children_of_their_own_attempts(
    storage_factory: Opener,
) -> None:
    spans, seen = Spans.new(), {}
    call = _calling(spans, seen)
    barrier = threading.Barrier(3)

    def meet(key: str) -> str:
        barrier.wait(20.0)  # only branches running at once pass
        return str(call(key))

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(*(ctx.run("meet", k) for k in ("a", "b", "c"))))

    flows = {"fan": workflow("fan").activities(meet=meet).execute(body)}
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        assert te.start("fan", id="f").result() == ["a", "b", "c"]
    finally:
        context.detach(token)

    [drive] = spans.named("weft drive")
    by_step = {attribute(a, "weft.step"): a for a in spans.named("weft activity meet")}
    for key, step in (("a", "1 (branch 1)"), ("b", "1 (branch 2)"), ("c", "1 (branch 3)")):
        assert _parent_attempt(spans, seen[key]["span"]) is by_step[step]
        assert spans.parent_of(by_step[step]) is drive
        assert seen[key]["baggage"] == "acme"  # the drive's OpenTelemetry context too
    assert len({seen[k]["thread"] for k in "abc"}) == 3
    assert len({s.context.trace_id for s in spans.all}) == 1 and spans.dangling() == []


def test_a_call_inside_an_async_activity_is_a_child_of_its_attempt(
    storage_factory: Opener,
) -> None:
    spans, seen = Spans.new(), {}
    call = _calling(spans, seen)

    async def fetch(key: str) -> str:
        return str(call(key))

    def body(ctx: Any, _: Any) -> Any:
        first = yield ctx.run("fetch", "x")
        return [first, *(yield ctx.all(ctx.run("fetch", "y"), ctx.run("fetch", "z")))]

    flows = {"aio": workflow("aio").activities(fetch=fetch).execute(body)}
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    assert te.start("aio", id="a").result() == ["x", "y", "z"]

    attempts = spans.named("weft activity fetch")
    assert len(attempts) == 3
    assert {_parent_attempt(spans, seen[k]["span"]).context.span_id for k in "xyz"} == {
        a.context.span_id for a in attempts
    }
    assert spans.dangling() == []


def _retrying_flow() -> Any:
    """Two drives (a failed attempt parks the run for its 5 s backoff), then a second step."""
    calls = {"n": 0}

    def flaky(_: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("down")
        return "ok"

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.run("flaky", None, retry=RetryPolicy(initial_backoff=5.0))
        return (yield ctx.run("flaky", None))

    return {"r": workflow("r").activities(flaky=flaky).execute(body)}


@pytest.mark.parametrize(
    ("at_start", "later"),
    [(ALWAYS_OFF, ALWAYS_ON), (ALWAYS_ON, ALWAYS_OFF)],
    ids=["dropped-at-start", "sampled-at-start"],
)
def test_the_sampling_decision_taken_at_the_start_holds_on_every_engine(
    storage_factory: Opener, at_start: Any, later: Any
) -> None:
    first, second = Spans.new(ParentBased(at_start)), Spans.new(ParentBased(later))
    te = make_engine(storage_factory, _retrying_flow(), tracer=first.tracer())
    te.start("r", id="r-1")  # first drive: the attempt fails, the run parks
    te._engine_options["tracer"] = second.tracer()  # another process, another root sampler
    engine = recover_fresh(te, storage_factory)
    te.advance(5.0)
    assert engine.get_handle("r-1").result() == "ok"

    kept = at_start is ALWAYS_ON
    assert sampled(stored_trace(te.storage, "r-1")) is kept
    assert [s.name for s in first.all] == (
        ["weft start r", "weft activity flaky", "weft drive r"] if kept else []
    )
    assert {s.name for s in second.all} == (
        {"weft drive r", "weft activity flaky"} if kept else set()
    )
    assert first.dangling() == [] and [s for s in second.all if s.parent is None] == []


def test_a_request_that_is_not_sampled_is_not_traced_below(storage_factory: Opener) -> None:
    spans = Spans.new()  # ParentBased(ALWAYS_ON): a sampled root, but the caller decided
    remote = trace.SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(0))
    te = make_engine(storage_factory, _retrying_flow(), tracer=spans.tracer())
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
    try:
        te.start("r", id="r-2")
    finally:
        context.detach(token)
    te.advance(5.0)
    assert te.get_handle("r-2").result() == "ok"
    assert not sampled(stored_trace(te.storage, "r-2")) and list(spans.all) == []


def test_a_run_stored_before_tracing_follows_the_root_sampler(storage_factory: Opener) -> None:
    spans = Spans.new(ParentBased(ALWAYS_OFF))
    te = make_engine(storage_factory, _retrying_flow())  # no tracer: no stored trace
    te.start("r", id="r-3")
    te._engine_options["tracer"] = spans.tracer()
    recover_fresh(te, storage_factory)
    te.advance(5.0)
    assert te.get_handle("r-3").result() == "ok" and list(spans.all) == []


def test_the_drive_that_fails_a_run_is_an_error(storage_factory: Opener) -> None:
    spans = Spans.new()

    def body(ctx: Any, _: Any) -> Any:
        yield ctx.sleep(1)
        raise ValueError("bad order")

    te = make_engine(storage_factory, {"bad": workflow("bad").execute(body)}, tracer=spans.tracer())
    te.start("bad", id="b")
    te.advance(1.0)
    parked, failing = spans.named("weft drive")
    assert parked.status.status_code is StatusCode.UNSET
    assert attribute(failing, "weft.outcome") == "failed"
    assert failing.status.status_code is StatusCode.ERROR
    assert spans.parent_of(failing) is spans.named("weft start bad")[0]


@pytest.mark.parametrize("runs_on", ["inline", "thread", "task", "branch"])
def test_an_attempt_span_ends_when_a_base_exception_escapes_its_activity(
    storage_factory: Opener, runs_on: str
) -> None:
    spans = Spans.new()

    def abort(_: Any) -> None:
        raise Abort

    async def abort_async(_: Any) -> None:
        raise Abort

    def body(ctx: Any, _: Any) -> Any:
        if runs_on == "branch":
            return (yield ctx.all(ctx.run("abort", None), ctx.run("abort", None)))
        name = "abort_async" if runs_on == "task" else "abort"
        return (yield ctx.run(name, None, timeout="1h" if runs_on == "thread" else None))

    flows = {"x": workflow("x").activities(abort=abort, abort_async=abort_async).execute(body)}
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    with pytest.raises(Abort):
        te.start("x", id="x")

    [drive] = spans.named("weft drive")
    attempts = spans.named("weft activity")
    assert attempts and {spans.parent_of(a).context.span_id for a in attempts} == {
        drive.context.span_id
    }
    assert attribute(attempts[0], "weft.outcome") == "error"
    assert attribute(attempts[0], "weft.error_type") == "Abort"
    assert drive.status.status_code is StatusCode.ERROR
