"""``Engine.create(tracer=...)`` with an OpenTelemetry tracer (the real SDK): a ``weft start``
span per run, one span per drive, one child span per activity attempt, and one trace per
run across invocations and engines."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from feature_support import (
    Opener,
    WriteCount,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_op,
    recover_fresh,
)
from opentelemetry.trace import StatusCode
from tracing_support import Spans, attribute, sampled, span_id, stored_trace, trace_id

from weft_serverless import (
    InvalidArgumentError,
    RetryPolicy,
    WorkflowFailedError,
    current_activity,
    workflow,
)
from weft_serverless.testing import TestEngine

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spans() -> Spans:
    return Spans.new()


def _flaky_flow(failures: int) -> Any:
    """``order``: a flaky activity (fails ``failures`` times, retried after 5 s: the run
    parks between attempts, so each attempt is a separate drive), then a second step."""
    calls = {"n": 0}

    def charge(amount: int) -> int:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise ConnectionError("card service down")
        return amount

    def ship(order: int) -> str:
        return f"shipped {order}"

    def body(ctx: Any, amount: int) -> Any:
        charged = yield ctx.run("charge", amount, retry=RetryPolicy(initial_backoff=5.0))
        return (yield ctx.run("ship", charged))

    return {"order": workflow("order").activities(charge=charge, ship=ship).execute(body)}


def test_drives_and_attempts_are_spans_of_one_trace(storage_factory: Opener, spans: Spans) -> None:
    te = make_engine(storage_factory, _flaky_flow(1), tracer=spans.tracer())
    handle = te.start("order", 7, id="o-1")
    te.advance(5.0)
    assert handle.result() == "shipped 7"

    traceparent = stored_trace(te.storage, "o-1")
    [start] = spans.named("weft start")
    drives = spans.named("weft drive")
    attempts = spans.named("weft activity")
    assert (start.name, start.parent) == ("weft start order", None)  # the run's root
    assert attribute(start, "weft.workflow_id") == "o-1"
    assert sampled(traceparent) and span_id(traceparent) == start.context.span_id
    assert [s.name for s in drives] == ["weft drive order", "weft drive order"]
    assert [(s.name, attribute(s, "weft.attempt")) for s in attempts] == [
        ("weft activity charge", 1),
        ("weft activity charge", 2),
        ("weft activity ship", 1),
    ]
    assert {s.context.trace_id for s in spans.all} == {trace_id(traceparent)}
    for drive in drives:  # children of the run's start span, carried across invocations
        assert spans.parent_of(drive) is start
        assert attribute(drive, "weft.workflow_id") == "o-1"
        assert attribute(drive, "weft.workflow_type") == "order"
        assert drive.status.status_code is StatusCode.UNSET
    assert [attribute(d, "weft.outcome") for d in drives] == ["running", "completed"]
    first, second = drives
    assert [spans.parent_of(a) for a in attempts] == [first, second, second]
    assert [attribute(a, "weft.outcome") for a in attempts] == ["failed", "completed", "completed"]
    assert attribute(attempts[0], "weft.error_type") == "ConnectionError"
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert {attribute(a, "weft.workflow_type") for a in attempts} == {"order"}
    assert [attribute(a, "weft.step") for a in attempts] == ["1", "1", "2"]
    assert spans.dangling() == []


def test_one_trace_across_engines_after_a_crash(storage_factory: Opener, spans: Spans) -> None:
    flows = _flaky_flow(0)
    te, crashing = crashable_engine(storage_factory, flows, tracer=spans.tracer())
    crashing.arm(puts_op("o-2", 1), after=False)  # dies committing the second step
    with expect_crash():
        te.start("order", 3, id="o-2")
    other = Spans.new()  # another process: its own provider and exporter
    te._engine_options["tracer"] = other.tracer()
    engine = recover_fresh(te, storage_factory)
    assert engine.get_handle("o-2").result() == "shipped 3"

    traceparent = stored_trace(te.storage, "o-2")
    [start] = spans.named("weft start")
    [crashed] = spans.named("weft drive")
    [resumed] = other.named("weft drive")
    assert attribute(crashed, "weft.outcome") == "error"
    assert crashed.status.status_code is StatusCode.ERROR
    assert attribute(resumed, "weft.outcome") == "completed"
    assert resumed.parent is not None and resumed.parent.span_id == start.context.span_id
    assert {s.context.trace_id for s in [*spans.all, *other.all]} == {trace_id(traceparent)}


def test_attempts_on_pool_threads_have_their_drive_as_parent(
    storage_factory: Opener, spans: Spans
) -> None:
    barrier = threading.Barrier(3)
    threads: set[str] = set()

    def meet(item: int) -> int:
        threads.add(threading.current_thread().name)
        barrier.wait(20.0)  # only branches running at once pass
        return item

    def body(ctx: Any, n: int) -> Any:
        return (yield ctx.all(*(ctx.run("meet", i) for i in range(n))))

    flows = {"fan": workflow("fan").activities(meet=meet).execute(body)}
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    assert te.start("fan", 3, id="f").result() == [0, 1, 2]

    [drive] = spans.named("weft drive")
    attempts = spans.named("weft activity")
    assert len(attempts) == 3 and threading.current_thread().name not in threads
    assert {spans.parent_of(a).context.span_id for a in attempts} == {drive.context.span_id}
    assert sorted(attribute(a, "weft.step") for a in attempts) == [
        "1 (branch 1)",
        "1 (branch 2)",
        "1 (branch 3)",
    ]


def test_a_run_joins_the_trace_of_the_request_that_started_it(
    storage_factory: Opener, spans: Spans
) -> None:
    tracer = spans.tracer()
    te = make_engine(storage_factory, _flaky_flow(0), tracer=tracer)
    with tracer.start_as_current_span("POST /workflows") as request:
        te.start("order", 1, id="o-3").result()
    request_id = request.get_span_context().span_id
    [start] = spans.named("weft start")
    assert spans.parent_of(start).context.span_id == request_id
    assert span_id(stored_trace(te.storage, "o-3")) == start.context.span_id
    assert {s.context.trace_id for s in spans.all} == {request.get_span_context().trace_id}
    assert spans.dangling() == []


def test_the_trace_context_rides_in_the_start_batch(storage_factory: Opener, spans: Spans) -> None:
    def body(ctx: Any, _: Any) -> Any:
        yield ctx.sleep(60)

    flows = {"nap": workflow("nap").execute(body)}
    counts = []
    for tracer in (None, spans.tracer()):
        te = make_engine(storage_factory, flows, tracer=tracer)
        before = WriteCount.of(te.storage)
        te.start("nap", id=f"n-{len(counts)}")
        after = WriteCount.of(te.storage)
        counts.append((after.batches - before.batches, after.conditional_batches, after.items))
    assert counts[1][0] == counts[0][0]  # the same number of writes, traced or not
    assert stored_trace(te.storage, "n-1").startswith("00-")


def test_a_run_stored_without_a_trace_still_reads_as_one_trace(
    storage_factory: Opener, spans: Spans
) -> None:
    te = make_engine(storage_factory, _flaky_flow(1))  # started before tracing was on
    te.start("order", 2, id="o-4")
    te._engine_options["tracer"] = spans.tracer()
    te.recover()
    te.advance(5.0)
    drives = spans.named("weft drive")  # recovery's, then the retry's
    assert [attribute(d, "weft.outcome") for d in drives] == ["running", "completed"]
    parents = {d.parent.span_id for d in drives if d.parent is not None}
    assert len(parents) == 1 and len({s.context.trace_id for s in spans.all}) == 1


def test_something_else_is_refused_before_anything_is_written(storage_factory: Opener) -> None:
    storage = storage_factory()
    before = WriteCount.of(storage)
    with pytest.raises(InvalidArgumentError, match="OpenTelemetry tracer"):
        TestEngine(_flaky_flow(0), storage=storage, tracer=object())
    assert WriteCount.of(storage).items == before.items


def test_without_a_tracer_no_tracing_library_is_imported() -> None:
    script = (
        "import sys\n"
        "from weft_serverless import workflow\n"
        "from weft_serverless.testing import TestEngine\n"
        "def body(ctx, x):\n"
        "    a = yield ctx.run('echo', x)\n"
        "    return (yield ctx.all(ctx.run('echo', a), ctx.run('echo', a)))\n"
        "flows = {'e': workflow('e').activities(echo=lambda x: x).execute(body)}\n"
        "assert TestEngine(flows).start('e', 1).result() == [1, 1]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'aws_xray_sdk', 'aws_lambda_powertools') "
        "or m == 'weft_serverless.engine.process.tracing'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_given_up_attempt_ends_its_span_with_why(storage_factory: Opener, spans: Spans) -> None:
    box: list[TestEngine] = []

    def hang(_: Any) -> None:
        box[0].clock.advance(11)  # past its timeout on the engine's (virtual) clock
        current_activity().cancel_event.wait(20.0)

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("hang", timeout="10s", retry=RetryPolicy(max_attempts=1)))

    flows = {"h": workflow("h").activities(hang=hang).execute(body)}
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    box.append(te)
    with pytest.raises(WorkflowFailedError):
        te.start("h", id="h").result()
    [attempt] = spans.named("weft activity")
    assert attribute(attempt, "weft.outcome") == "timed-out"
    assert attribute(attempt, "weft.error_type") == "ActivityTimeoutError"
    [drive] = spans.named("weft drive")
    assert spans.parent_of(attempt) is drive
    assert attribute(drive, "weft.outcome") == "failed"


def test_a_child_run_joins_its_parents_trace(storage_factory: Opener, spans: Spans) -> None:
    def kid(ctx: Any, x: int) -> Any:
        return (yield ctx.run("echo", x))

    def parent(ctx: Any, x: int) -> Any:
        return (yield ctx.start_child("kid", x, id="k-1"))

    flows = {
        "kid": workflow("kid").activities(echo=lambda x: x).execute(kid),
        "parent": workflow("parent").execute(parent),
    }
    te = make_engine(storage_factory, flows, tracer=spans.tracer())
    assert te.start("parent", 5, id="p-1").result() == 5
    traced = trace_id(stored_trace(te.storage, "p-1"))
    assert trace_id(stored_trace(te.storage, "k-1")) == traced
    [kid_start] = spans.named("weft start kid")
    [kid_drive] = spans.named("weft drive kid")
    starter = spans.named("weft drive parent")[0]  # the drive that started the child
    assert spans.parent_of(kid_start) is starter
    assert spans.parent_of(kid_drive) is kid_start
    assert {s.context.trace_id for s in spans.all} == {traced}
    assert spans.dangling() == []
