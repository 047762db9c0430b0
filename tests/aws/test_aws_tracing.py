"""powertools' ``Tracer`` as the engine's tracer, in its disabled test mode
(``POWERTOOLS_TRACE_DISABLED``: every call works, nothing is sent), and the engine's
structured log fields in the Lambda runtime's JSON lines."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aws_flows
import pytest
from aws_support import Api, FakeMonotonic, log_lines

from weft_serverless import RetryPolicy, workflow
from weft_serverless.aws import build_engine, get_engine, make_api_handler, reset_engine
from weft_serverless.aws.metrics import InvocationMetrics, Snapshot
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import TestEngine, VirtualClock


@pytest.fixture
def tracer(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    from aws_lambda_powertools import Tracer

    return Tracer(service="weft-test")


def test_powertools_tracer_in_disabled_mode_traces_drives_and_attempts(
    storage: DynamoDBStorage,
    clock: VirtualClock,
    monotonic: FakeMonotonic,
    tracer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert tracer.disabled
    segments: list[Any] = []
    real = tracer.provider.in_subsegment

    @contextmanager
    def recording(name: str | None = None, **kwargs: Any) -> Iterator[Any]:
        with real(name=name, **kwargs) as segment:
            segments.append((name, segment))
            yield segment

    monkeypatch.setattr(tracer.provider, "in_subsegment", recording)
    reset_engine()
    get_engine(storage=storage, workflows=aws_flows.workflows, clock=clock, tracer=tracer)
    api = Api(make_api_handler(sleep=monotonic.sleep, monotonic=monotonic), monotonic)

    reply = api("POST", "/workflows", {"workflow_type": "greeter", "id": "g-1", "input": "ada"})
    assert reply.status == 201
    assert api("GET", "/workflows/g-1").body["result"] == {"greeting": "hello ada"}
    [(name, drive)] = segments
    assert name == "## weft drive greeter"
    [attempt] = drive.subsegments  # attached to its drive explicitly, then closed
    assert attempt.name == "weft activity greet" and not attempt.in_progress
    assert not attempt.sampled  # a disabled tracer's segments are never sent


def test_engine_json_lines_carry_type_step_and_correlation_id(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    body = {"workflow_type": "failing", "id": "f-1"}
    api("POST", "/workflows", body, headers={"X-Correlation-Id": "corr-9"})

    lines = log_lines(capsys.readouterr().out)
    [failed] = [line for line in lines if line["message"].startswith("workflow f-1 failed:")]
    assert failed["name"] == "weft_serverless.engine"
    assert (failed["workflow_id"], failed["workflow_type"], failed["step"]) == (
        "f-1",
        "failing",
        "1",
    )
    assert failed["correlation_id"] == "corr-9"


def test_a_dead_lettered_finalizer_is_the_metric_its_alarm_watches() -> None:
    def down(_: Any) -> None:
        raise RuntimeError("hold service down")

    def flow(ctx: Any, _: Any) -> Any:
        ctx.on_cancel("release_hold", None, retry=RetryPolicy(max_attempts=1))
        yield ctx.sleep("1h")

    te = TestEngine({"d": workflow("d").activities(release_hold=down).execute(flow)})
    te.start("d", id="d")
    before = Snapshot.of(te.engine)
    te.cancel("d")
    assert len(te.list_dead_letters("d")) == 1
    counts = InvocationMetrics.between(before, Snapshot.of(te.engine)).counts
    assert counts["FinalizersDeadLettered"] == 1  # infra's FinalizersDeadLettered alarm


def test_the_workflows_module_may_export_the_tracer(
    tracer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEFT_WORKFLOWS_MODULE", "aws_flows")
    assert build_engine(storage=MemoryStorage()).runtime.tracer is None
    monkeypatch.setattr(aws_flows, "tracer", tracer, raising=False)
    engine = build_engine(storage=MemoryStorage())
    assert type(engine.runtime.tracer).__name__ == "XRayTracing"
