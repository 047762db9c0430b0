"""powertools' ``Tracer`` with the real ``aws-xray-sdk``, enabled (``disabled=False``) in a
plain process, as a container's code runs outside Lambda or on a background thread.

With no segment open, tracing is skipped as X-Ray's ``context_missing`` says (log, ignore,
or raise, which the engine logs) and the run completes. With a segment open (begun here as
Lambda's would be), each drive is a subsegment, each attempt a subsegment of its drive,
what an activity records nests under its attempt, and the segment reaches the daemon whole
even when a ``BaseException`` escapes an activity. Segments go to an in-memory emitter.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from weft_serverless import Engine, RetryPolicy, workflow
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import TestEngine


class Emitter:
    """Receives what X-Ray's recorder would send to the daemon, as JSON documents."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(json.loads(entity.serialize()))

    def set_daemon_address(self, address: str | None) -> None:
        pass

    def entities(self) -> dict[str, dict[str, Any]]:
        """Every segment and subsegment sent, by id, each with its ``parent`` id (streamed
        subsegments name it; nested ones are inside it)."""
        found: dict[str, dict[str, Any]] = {}

        def walk(document: dict[str, Any], parent: str | None) -> None:
            found[document["id"]] = {**document, "parent": document.get("parent_id", parent)}
            for child in document.get("subsegments", []):
                walk(child, document["id"])

        for document in self.documents:
            walk(document, None)
        return found

    def named(self, prefix: str) -> list[dict[str, Any]]:
        return [e for e in self.entities().values() if e["name"].startswith(prefix)]


class Abort(BaseException):
    """Escapes an activity the way ``KeyboardInterrupt`` or ``SystemExit`` would."""


@pytest.fixture
def xray(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, Emitter]]:
    """An enabled powertools ``Tracer`` on X-Ray's global recorder, whose settings (and the
    SDK's on/off switch, which a disabled ``Tracer`` turns off) are restored afterwards."""
    from aws_lambda_powertools import Tracer
    from aws_xray_sdk import global_sdk_config
    from aws_xray_sdk.core import xray_recorder

    was_enabled = global_sdk_config.sdk_enabled()
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    monkeypatch.delenv("AWS_XRAY_CONTEXT_MISSING", raising=False)
    emitter = Emitter()
    monkeypatch.setattr(xray_recorder, "emitter", emitter)
    monkeypatch.setattr(xray_recorder, "streaming_threshold", xray_recorder.streaming_threshold)
    monkeypatch.setattr(xray_recorder.context, "context_missing", "LOG_ERROR")
    Tracer._reset_config()  # a disabled Tracer made earlier stays disabled for all others
    global_sdk_config.set_sdk_enabled(True)
    tracer = Tracer(service="weft-test", disabled=False, auto_patch=False)
    assert not tracer.disabled
    try:
        yield tracer, xray_recorder, emitter
    finally:
        xray_recorder.clear_trace_entities()
        Tracer._reset_config()
        global_sdk_config.set_sdk_enabled(was_enabled)


def _flows(recorder: Any) -> dict[str, Any]:
    """``order``: a step, a two-branch ``all``; each activity records a subsegment of its own
    (as X-Ray's boto3 patch does), named after its input."""

    def call(key: str) -> str:
        with recorder.in_subsegment(f"call {key}"):
            return key

    def body(ctx: Any, _: Any) -> Any:
        first = yield ctx.run("call", "one")
        return [first, *(yield ctx.all(ctx.run("call", "two"), ctx.run("call", "three")))]

    return {"order": workflow("order").activities(call=call).execute(body)}


@pytest.mark.parametrize("strategy", ["LOG_ERROR", "IGNORE_ERROR", "RUNTIME_ERROR"])
def test_without_a_segment_the_run_completes_untraced(
    xray: tuple[Any, Any, Emitter], caplog: pytest.LogCaptureFixture, strategy: str
) -> None:
    tracer, recorder, emitter = xray
    recorder.context.context_missing = strategy
    caplog.set_level(logging.WARNING)

    def call(key: str) -> str:
        return key

    def body(ctx: Any, _: Any) -> Any:
        first = yield ctx.run("call", "one")
        return [first, *(yield ctx.all(ctx.run("call", "two"), ctx.run("call", "three")))]

    flows = {"order": workflow("order").activities(call=call).execute(body)}
    te = TestEngine(flows, tracer=tracer)
    assert te.start("order", id="o-1").result() == ["one", "two", "three"]
    assert te.describe("o-1").status == "completed"
    assert emitter.documents == []
    said = [(r.name, r.levelname) for r in caplog.records]
    if strategy == "LOG_ERROR":  # X-Ray's own report of the missing segment
        assert ("aws_xray_sdk.core.context", "ERROR") in said
    elif strategy == "RUNTIME_ERROR":  # the recorder raised; the engine says it skipped
        assert ("weft_serverless.engine", "WARNING") in said
    else:
        assert not [r for r in caplog.records if r.name.startswith("weft_serverless")]


def test_automatic_modes_background_thread_drives_untraced(
    xray: tuple[Any, Any, Emitter],
) -> None:
    tracer, recorder, emitter = xray
    flows = _flows(recorder)
    recorder.begin_segment("caller", sampling=1)  # the caller's thread has one; the driver not
    try:
        with Engine.create(
            MemoryStorage(), flows, background_tasks="automatic", tracer=tracer
        ) as engine:
            handle = engine.start("order", id="o-2")
            assert handle.result(timeout=10) == ["one", "two", "three"]
    finally:
        recorder.end_segment()
    assert [e["name"] for e in emitter.entities().values()] == ["caller"]


def test_with_a_segment_drives_attempts_and_their_calls_nest(
    xray: tuple[Any, Any, Emitter],
) -> None:
    tracer, recorder, emitter = xray
    te = TestEngine(_flows(recorder), tracer=tracer)
    segment = recorder.begin_segment("invocation", sampling=1)
    assert te.start("order", id="o-3").result() == ["one", "two", "three"]
    recorder.end_segment()

    entities = emitter.entities()
    assert all(not e.get("in_progress") for e in entities.values())
    [drive] = emitter.named("## weft drive order")
    assert drive["parent"] == segment.id
    annotations = drive["annotations"]
    assert (annotations["weft_workflow_id"], annotations["weft_outcome"]) == ("o-3", "completed")
    assert len(annotations["weft_trace"]) == 32
    attempts = {e["annotations"]["weft_step"]: e for e in emitter.named("weft activity call")}
    assert sorted(attempts) == ["1", "2 (branch 1)", "2 (branch 2)"]
    for attempt in attempts.values():
        assert attempt["parent"] == drive["id"]
        assert attempt["annotations"]["weft_outcome"] == "completed"
        assert attempt["annotations"]["weft_workflow_type"] == "order"
    for key, step in (("one", "1"), ("two", "2 (branch 1)"), ("three", "2 (branch 2)")):
        [call] = emitter.named(f"call {key}")
        assert call["parent"] == attempts[step]["id"], key


def test_the_drive_that_fails_a_run_has_the_error_flag(xray: tuple[Any, Any, Emitter]) -> None:
    tracer, recorder, emitter = xray

    def refuse(_: Any) -> None:
        raise PermissionError("declined")

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("refuse", None, retry=RetryPolicy(max_attempts=1)))

    te = TestEngine({"pay": workflow("pay").activities(refuse=refuse).execute(body)}, tracer=tracer)
    recorder.begin_segment("invocation", sampling=1)
    te.start("pay", id="p")
    recorder.end_segment()
    [drive] = emitter.named("## weft drive pay")
    [attempt] = emitter.named("weft activity refuse")
    assert drive["annotations"]["weft_outcome"] == "failed" and drive.get("error") is True
    assert attempt["annotations"]["weft_error_type"] == "PermissionError"
    assert attempt.get("error") is True


@pytest.mark.parametrize("runs_on", ["inline", "thread", "branch"])
def test_the_segment_is_sent_whole_when_a_base_exception_escapes(
    xray: tuple[Any, Any, Emitter], runs_on: str
) -> None:
    tracer, recorder, emitter = xray
    started = threading.Event()

    def abort(_: Any) -> None:
        started.set()
        raise Abort

    def body(ctx: Any, _: Any) -> Any:
        if runs_on == "branch":
            return (yield ctx.all(ctx.run("abort", None), ctx.run("abort", None)))
        return (yield ctx.run("abort", None, timeout="1h" if runs_on == "thread" else None))

    te = TestEngine({"x": workflow("x").activities(abort=abort).execute(body)}, tracer=tracer)
    recorder.begin_segment("invocation", sampling=1)
    with pytest.raises(Abort):
        te.start("x", id="x")
    recorder.end_segment()

    assert started.is_set()
    [segment] = [e for e in emitter.entities().values() if e["name"] == "invocation"]
    assert not segment.get("in_progress")  # sent: every subsegment under it was closed
    [drive] = emitter.named("## weft drive x")
    assert drive["annotations"]["weft_outcome"] == "error" and drive.get("fault") is True
    attempts = emitter.named("weft activity abort")
    assert attempts and all(a["parent"] == drive["id"] for a in attempts)
    assert {a["annotations"]["weft_outcome"] for a in attempts} <= {"error", "cancelled"}
    assert "error" in {a["annotations"]["weft_outcome"] for a in attempts}
