"""A small in-memory stand-in for ``opentelemetry-api`` and an in-memory span exporter.

It follows the parts of the OpenTelemetry API the engine uses (``trace.SpanContext``,
``TraceFlags``, ``NonRecordingSpan``, ``set_span_in_context``, ``get_current_span``,
``use_span``, ``Status``/``StatusCode``; a tracer's ``start_span`` and
``start_as_current_span``), so tests prove the engine's spans, parents and attributes
without the real package. ``install`` puts it in ``sys.modules`` as ``opentelemetry.trace``.
"""

from __future__ import annotations

import contextvars
import enum
import os
import sys
import threading
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest


class TraceFlags(int):
    DEFAULT = 0x00
    SAMPLED = 0x01


@dataclass(frozen=True)
class SpanContext:
    trace_id: int
    span_id: int
    is_remote: bool
    trace_flags: int = 0

    @property
    def is_valid(self) -> bool:
        return self.trace_id != 0 and self.span_id != 0


INVALID_SPAN_CONTEXT = SpanContext(0, 0, False)


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True)
class Status:
    status_code: StatusCode = StatusCode.UNSET
    description: str | None = None


class NonRecordingSpan:
    def __init__(self, context: SpanContext) -> None:
        self._context = context

    def get_span_context(self) -> SpanContext:
        return self._context


INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)
_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("current_span", default=None)


def set_span_in_context(span: Any, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {**(context or {}), "span": span}


def get_current_span(context: Mapping[str, Any] | None = None) -> Any:
    if context is not None:
        return context.get("span", INVALID_SPAN)
    current = _CURRENT.get()
    return INVALID_SPAN if current is None else current


@contextmanager
def use_span(
    span: Any,
    end_on_exit: bool = False,
    record_exception: bool = True,
    set_status_on_exception: bool = True,
) -> Iterator[Any]:
    token = _CURRENT.set(span)
    try:
        yield span
    finally:
        _CURRENT.reset(token)
        if end_on_exit:
            span.end()


@dataclass
class FakeSpan:
    """A recording span: what an in-memory exporter would receive."""

    name: str
    context: SpanContext
    parent: SpanContext | None
    attributes: dict[str, Any]
    exporter: InMemoryExporter
    thread: str = field(default_factory=lambda: threading.current_thread().name)
    status: Status = Status()
    exceptions: list[BaseException] = field(default_factory=list)
    ended: bool = False

    def get_span_context(self) -> SpanContext:
        return self.context

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_status(self, status: Status) -> None:
        self.status = status

    def record_exception(self, exc: BaseException) -> None:
        self.exceptions.append(exc)

    def end(self) -> None:
        assert not self.ended, f"span {self.name} ended twice"
        self.ended = True
        self.exporter.export(self)


class InMemoryExporter:
    def __init__(self) -> None:
        self.spans: list[FakeSpan] = []
        self._lock = threading.Lock()

    def export(self, span: FakeSpan) -> None:
        with self._lock:
            self.spans.append(span)

    def named(self, prefix: str) -> list[FakeSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]


class FakeTracer:
    """An OTel-shaped tracer writing finished spans to ``exporter``."""

    def __init__(self, exporter: InMemoryExporter) -> None:
        self.exporter = exporter

    def start_span(
        self,
        name: str,
        context: Mapping[str, Any] | None = None,
        kind: Any = None,
        attributes: Mapping[str, Any] | None = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> FakeSpan:
        parent = get_current_span(context).get_span_context()
        trace_id = parent.trace_id if parent.is_valid else int.from_bytes(os.urandom(16), "big")
        own = SpanContext(trace_id, int.from_bytes(os.urandom(8), "big"), False, TraceFlags(1))
        return FakeSpan(
            name, own, parent if parent.is_valid else None, dict(attributes or {}), self.exporter
        )

    @contextmanager
    def start_as_current_span(self, name: str, **options: Any) -> Iterator[FakeSpan]:
        span = self.start_span(name, **options)
        with use_span(span, end_on_exit=True):
            yield span


def module() -> types.ModuleType:
    trace = types.ModuleType("opentelemetry.trace")
    for name in (
        "TraceFlags",
        "SpanContext",
        "StatusCode",
        "Status",
        "NonRecordingSpan",
        "set_span_in_context",
        "get_current_span",
        "use_span",
        "INVALID_SPAN",
    ):
        setattr(trace, name, globals()[name])
    return trace


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import opentelemetry.trace`` find this fake for the test's duration."""
    package = types.ModuleType("opentelemetry")
    trace = module()
    package.trace = trace  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "opentelemetry", package)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", trace)
