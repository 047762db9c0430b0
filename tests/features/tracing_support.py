"""The real OpenTelemetry SDK for the tracing tests: one ``TracerProvider`` per test, its
finished spans in an ``InMemorySpanExporter``; the global provider is never set.

``Spans`` reads the exported tree: spans by name prefix, the parent of each, and whether a
span's parent was exported too (a dangling parent shows as a broken tree in any backend).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from weft_serverless.engine.persistence.records import load_history
from weft_serverless.storage.base import Storage


@dataclass
class Spans:
    """A provider writing every finished span to ``exporter``."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    @classmethod
    def new(cls, sampler: Sampler | None = None) -> Spans:
        provider = TracerProvider() if sampler is None else TracerProvider(sampler=sampler)
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider, exporter)

    def tracer(self, name: str = "weft-test") -> trace.Tracer:
        return self.provider.get_tracer(name)

    @property
    def all(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.all if s.name.startswith(prefix)]

    def by_id(self, span_id: int) -> ReadableSpan:
        [span] = [s for s in self.all if s.context.span_id == span_id]
        return span

    def parent_of(self, span: ReadableSpan) -> ReadableSpan:
        """The exported span ``span`` names as parent (fails if it was not exported)."""
        assert span.parent is not None, f"{span.name} has no parent"
        return self.by_id(span.parent.span_id)

    def dangling(self) -> list[str]:
        """Spans whose parent was not exported."""
        ids = {s.context.span_id for s in self.all}
        return [s.name for s in self.all if s.parent is not None and s.parent.span_id not in ids]


def instrumented_call(provider: TracerProvider, name: str) -> int:
    """What an auto-instrumentation (boto3, requests) does: open a span on the *current*
    context, through ``trace.get_tracer``; returns the new span's id."""
    library = trace.get_tracer("instrumented-library", tracer_provider=provider)
    with library.start_as_current_span(name) as span:
        span_id: int = span.get_span_context().span_id
        return span_id


def stored_trace(storage: Storage, workflow_id: str) -> str:
    history = load_history(storage, workflow_id)
    assert history is not None
    traceparent: str = history.state.extra["trace"]
    return traceparent


def trace_id(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


def span_id(traceparent: str) -> int:
    return int(traceparent.split("-")[2], 16)


def sampled(traceparent: str) -> bool:
    """The W3C sampled flag (the SDK also sets bit 2, "random trace id")."""
    return bool(int(traceparent.split("-")[3], 16) & 0x01)


def attribute(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes[key]
