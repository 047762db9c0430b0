"""``Engine.create(tracer=...)`` with an OpenTelemetry-shaped tracer: one span per drive, one
child span per activity attempt, and one trace per run across invocations and engines.

The tracer is ``otel_fake``'s in-memory stand-in for ``opentelemetry-api`` (the real package
is not a dependency); finished spans land in its exporter.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import otel_fake
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

from weft_serverless import (
    InvalidArgumentError,
    RetryPolicy,
    WorkflowFailedError,
    current_activity,
    workflow,
)
from weft_serverless.engine.records import load_history
from weft_serverless.storage.base import Storage
from weft_serverless.testing import TestEngine

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> otel_fake.InMemoryExporter:
    otel_fake.install(monkeypatch)
    return otel_fake.InMemoryExporter()


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


def _stored_trace(storage: Storage, workflow_id: str) -> str:
    history = load_history(storage, workflow_id)
    assert history is not None
    traceparent: str = history.state.extra["trace"]
    return traceparent


def _trace_id(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


def test_drives_and_attempts_are_spans_of_one_trace(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    te = make_engine(storage_factory, _flaky_flow(1), tracer=otel_fake.FakeTracer(exporter))
    handle = te.start("order", 7, id="o-1")
    te.advance(5.0)
    assert handle.result() == "shipped 7"

    traceparent = _stored_trace(te.storage, "o-1")
    drives = exporter.named("weft drive")
    attempts = exporter.named("weft activity")
    assert [s.name for s in drives] == ["weft drive order", "weft drive order"]
    assert [(s.name, s.attributes["weft.attempt"]) for s in attempts] == [
        ("weft activity charge", 1),
        ("weft activity charge", 2),
        ("weft activity ship", 1),
    ]
    assert {s.context.trace_id for s in exporter.spans} == {_trace_id(traceparent)}
    for drive in drives:  # children of the run's stored context, carried across invocations
        assert drive.parent is not None and drive.parent.span_id == int(
            traceparent.split("-")[2], 16
        )
        assert drive.attributes["weft.workflow_id"] == "o-1"
        assert drive.attributes["weft.workflow_type"] == "order"
    assert [d.attributes["weft.outcome"] for d in drives] == ["running", "completed"]
    first, second = drives
    assert [a.parent.span_id for a in attempts if a.parent] == [
        first.context.span_id,
        second.context.span_id,
        second.context.span_id,
    ]
    assert [a.attributes["weft.outcome"] for a in attempts] == ["failed", "completed", "completed"]
    assert attempts[0].attributes["weft.error_type"] == "ConnectionError"
    assert attempts[0].status.status_code is otel_fake.StatusCode.ERROR
    assert {a.attributes["weft.workflow_type"] for a in attempts} == {"order"}
    assert [a.attributes["weft.step"] for a in attempts] == ["1", "1", "2"]
    assert all(s.ended for s in exporter.spans)


def test_one_trace_across_engines_after_a_crash(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    flows = _flaky_flow(0)
    te, crashing = crashable_engine(storage_factory, flows, tracer=otel_fake.FakeTracer(exporter))
    crashing.arm(puts_op("o-2", 1), after=False)  # dies committing the second step
    with expect_crash():
        te.start("order", 3, id="o-2")
    te._engine_options["tracer"] = otel_fake.FakeTracer(exporter)  # another process's tracer
    engine = recover_fresh(te, storage_factory)
    assert engine.get_handle("o-2").result() == "shipped 3"

    trace_id = _trace_id(_stored_trace(te.storage, "o-2"))
    drives = exporter.named("weft drive")
    assert len(drives) == 2 and drives[0].attributes["weft.outcome"] == "error"
    assert drives[1].attributes["weft.outcome"] == "completed"
    assert {s.context.trace_id for s in exporter.spans} == {trace_id}


def test_attempts_on_pool_threads_have_their_drive_as_parent(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
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
    te = make_engine(storage_factory, flows, tracer=otel_fake.FakeTracer(exporter))
    assert te.start("fan", 3, id="f").result() == [0, 1, 2]

    [drive] = exporter.named("weft drive")
    attempts = exporter.named("weft activity")
    assert len(attempts) == 3 and threading.current_thread().name not in threads
    assert {a.parent.span_id for a in attempts if a.parent} == {drive.context.span_id}
    assert sorted(a.attributes["weft.step"] for a in attempts) == [
        "1 (branch 1)",
        "1 (branch 2)",
        "1 (branch 3)",
    ]


def test_a_run_joins_the_trace_of_the_request_that_started_it(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    tracer = otel_fake.FakeTracer(exporter)
    te = make_engine(storage_factory, _flaky_flow(0), tracer=tracer)
    with tracer.start_as_current_span("POST /workflows") as request:
        te.start("order", 1, id="o-3").result()
    assert _trace_id(_stored_trace(te.storage, "o-3")) == request.context.trace_id
    assert {s.context.trace_id for s in exporter.spans} == {request.context.trace_id}


def test_the_trace_context_rides_in_the_start_batch(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    def body(ctx: Any, _: Any) -> Any:
        yield ctx.sleep(60)

    flows = {"nap": workflow("nap").execute(body)}
    counts = []
    for tracer in (None, otel_fake.FakeTracer(exporter)):
        te = make_engine(storage_factory, flows, tracer=tracer)
        before = WriteCount.of(te.storage)
        te.start("nap", id=f"n-{len(counts)}")
        after = WriteCount.of(te.storage)
        counts.append((after.batches - before.batches, after.conditional_batches, after.items))
    assert counts[1][0] == counts[0][0]  # the same number of writes, traced or not
    assert _stored_trace(te.storage, "n-1").startswith("00-")


def test_a_run_stored_without_a_trace_still_reads_as_one_trace(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    te = make_engine(storage_factory, _flaky_flow(1))  # started before tracing was on
    te.start("order", 2, id="o-4")
    te._engine_options["tracer"] = otel_fake.FakeTracer(exporter)
    te.recover()
    te.advance(5.0)
    te.crash()
    te.recover()  # another engine drives nothing new, but a further drive would join
    drives = exporter.named("weft drive")
    assert drives and len({s.context.trace_id for s in exporter.spans}) == 1


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
        "    return (yield ctx.run('echo', x))\n"
        "flows = {'e': workflow('e').activities(echo=lambda x: x).execute(body)}\n"
        "assert TestEngine(flows).start('e', 1).result() == 1\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'aws_xray_sdk') or m == 'weft_serverless.engine.tracing'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_given_up_attempt_ends_its_span_with_why(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    box: list[TestEngine] = []

    def hang(_: Any) -> None:
        box[0].clock.advance(11)  # past its timeout on the engine's (virtual) clock
        current_activity().cancel_event.wait(20.0)

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("hang", timeout="10s", retry=RetryPolicy(max_attempts=1)))

    flows = {"h": workflow("h").activities(hang=hang).execute(body)}
    te = make_engine(storage_factory, flows, tracer=otel_fake.FakeTracer(exporter))
    box.append(te)
    with pytest.raises(WorkflowFailedError):
        te.start("h", id="h").result()
    [attempt] = exporter.named("weft activity")
    assert attempt.attributes["weft.outcome"] == "timed-out"
    assert attempt.attributes["weft.error_type"] == "ActivityTimeoutError"
    [drive] = exporter.named("weft drive")
    assert attempt.parent is not None and attempt.parent.span_id == drive.context.span_id
    assert drive.attributes["weft.outcome"] == "failed"


def test_a_child_run_joins_its_parents_trace(
    storage_factory: Opener, exporter: otel_fake.InMemoryExporter
) -> None:
    def kid(ctx: Any, x: int) -> Any:
        return (yield ctx.run("echo", x))

    def parent(ctx: Any, x: int) -> Any:
        return (yield ctx.start_child("kid", x, id="k-1"))

    flows = {
        "kid": workflow("kid").activities(echo=lambda x: x).execute(kid),
        "parent": workflow("parent").execute(parent),
    }
    te = make_engine(storage_factory, flows, tracer=otel_fake.FakeTracer(exporter))
    assert te.start("parent", 5, id="p-1").result() == 5
    trace_id = _trace_id(_stored_trace(te.storage, "p-1"))
    assert _trace_id(_stored_trace(te.storage, "k-1")) == trace_id
    [kid_drive] = [s for s in exporter.named("weft drive kid")]
    starter = exporter.named("weft drive parent")[0]  # the drive that started the child
    assert kid_drive.parent is not None and kid_drive.parent.span_id == starter.context.span_id
    assert {s.context.trace_id for s in exporter.spans} == {trace_id}
