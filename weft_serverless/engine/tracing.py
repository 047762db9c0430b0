"""Spans for drives and activity attempts, on an OpenTelemetry tracer or powertools' ``Tracer``.

Optional by construction: nothing here imports a tracing library until ``adapt`` is given a
tracer, and with none the engine's only cost is one ``if rt.tracer is None`` per drive and
per attempt.

A run spans many invocations, so its trace context lives in the run's state: the start
batch stores a W3C ``traceparent`` in the state's extra (the caller's trace when a span is
current, else a new one), and every drive's span is a child of it, on any engine, after any
crash. A run stored before tracing was on gets a trace id derived from its id and creation
time, the same on every engine. Attempt spans name their drive's span as parent explicitly
(``parent_of``): an attempt may run on a pool thread, where no current span is set.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from weft_serverless.errors import InvalidArgumentError

TRACE_FIELD = "trace"
"""The state's extra field holding the run's ``traceparent``."""

T = TypeVar("T")

Attributes = Mapping[str, str | int | float | bool]


class Tracing(Protocol):
    """What the engine asks of a tracer, whichever library is behind it."""

    def new_traceparent(self) -> str: ...

    def drive(
        self, workflow_id: str, traceparent: str, attributes: Attributes, run: Callable[[], T]
    ) -> T: ...

    def attempt_started(self, workflow_id: str, name: str, attributes: Attributes) -> Any: ...

    def attempt_ended(self, span: Any, outcome: str, error_type: str = "") -> None: ...


def adapt(tracer: Any) -> Tracing | None:
    """The engine's view of ``tracer`` (None: no tracing), recognised by its shape:
    OpenTelemetry's ``start_span``/``start_as_current_span``, or powertools' ``Tracer``
    (``provider.in_subsegment``, ``put_annotation``)."""
    if tracer is None:
        return None
    if callable(getattr(tracer, "start_span", None)) and callable(
        getattr(tracer, "start_as_current_span", None)
    ):
        return OpenTelemetryTracing(tracer)
    provider = getattr(tracer, "provider", None)
    if callable(getattr(provider, "in_subsegment", None)) and callable(
        getattr(tracer, "put_annotation", None)
    ):
        return XRayTracing(tracer)
    raise InvalidArgumentError(
        f"tracer must be an OpenTelemetry tracer (trace.get_tracer(...)) or powertools' "
        f"Tracer(), not {type(tracer).__name__}"
    )


def traceparent_of(state_extra: Mapping[str, Any], workflow_id: str, created_at: float) -> str:
    """The run's stored trace context, or one derived from the run itself (a run stored
    before tracing was on): the same on every engine, so its drives still share a trace."""
    stored = state_extra.get(TRACE_FIELD)
    if isinstance(stored, str) and _parse(stored) is not None:
        return stored
    import hashlib  # only with a tracer: hashlib's import is a cold-start cost

    digest = hashlib.sha256(f"{workflow_id}\0{created_at!r}".encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-01"


def _parse(traceparent: str) -> tuple[int, int] | None:
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return (trace_id, span_id) if trace_id and span_id else None


class _Drives:
    """The open drive span of each run this engine drives (one drive per run at a time)."""

    def __init__(self) -> None:
        self._spans: dict[str, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def open(self, workflow_id: str, span: Any, workflow_type: Any) -> tuple[Any, Any] | None:
        with self._lock:
            previous = self._spans.get(workflow_id)
            self._spans[workflow_id] = (span, workflow_type)
        return previous

    def close(self, workflow_id: str, previous: tuple[Any, Any] | None) -> None:
        with self._lock:
            if previous is None:
                self._spans.pop(workflow_id, None)
            else:
                self._spans[workflow_id] = previous

    def parent_of(self, workflow_id: str) -> tuple[Any, Any]:
        """The run's open drive span and its workflow type ((None, None): no drive)."""
        with self._lock:
            return self._spans.get(workflow_id, (None, None))


class OpenTelemetryTracing:
    """Spans on an OpenTelemetry tracer (``opentelemetry-api`` is imported here, lazily)."""

    def __init__(self, tracer: Any) -> None:
        try:
            trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            raise InvalidArgumentError(
                "tracer looks like an OpenTelemetry tracer but opentelemetry-api is not "
                "installed; install it, or pass powertools' Tracer()"
            ) from None
        self._tracer, self._trace, self._drives = tracer, trace, _Drives()

    def new_traceparent(self) -> str:
        """The caller's trace when a span is current (the run joins the request that
        started it), else a new one."""
        current = self._trace.get_current_span().get_span_context()
        if current.is_valid:
            return f"00-{current.trace_id:032x}-{current.span_id:016x}-01"
        return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"

    def drive(
        self, workflow_id: str, traceparent: str, attributes: Attributes, run: Callable[[], T]
    ) -> T:
        trace = self._trace
        ids = _parse(traceparent)
        context = None
        if ids is not None:
            remote = trace.SpanContext(
                trace_id=ids[0],
                span_id=ids[1],
                is_remote=True,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
            context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        span = self._tracer.start_span(
            f"weft drive {attributes['weft.workflow_type']}",
            context=context,
            attributes=dict(attributes),
        )
        previous = self._drives.open(workflow_id, span, attributes["weft.workflow_type"])
        try:
            # current while the drive runs: spans the workflow's own code opens nest here
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                status = run()
        except BaseException as exc:
            span.set_attribute("weft.outcome", "error")
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            raise
        else:
            span.set_attribute("weft.outcome", "gone" if status is None else str(status))
            return status
        finally:
            self._drives.close(workflow_id, previous)
            span.end()

    def attempt_started(self, workflow_id: str, name: str, attributes: Attributes) -> Any:
        parent, workflow_type = self._drives.parent_of(workflow_id)
        context = None if parent is None else self._trace.set_span_in_context(parent)
        named = dict(attributes)
        if workflow_type is not None:
            named["weft.workflow_type"] = workflow_type
        return self._tracer.start_span(
            name, context=context, attributes=named, start_time=time.time_ns()
        )

    def attempt_ended(self, span: Any, outcome: str, error_type: str = "") -> None:
        span.set_attribute("weft.outcome", outcome)
        if error_type:
            span.set_attribute("weft.error_type", error_type)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error_type))
        span.end()


class XRayTracing:
    """Subsegments on powertools' ``Tracer`` (X-Ray).

    Inside Lambda, X-Ray owns the invocation's trace id, so a drive cannot join a stored
    trace; each drive's subsegment carries the run's trace id and workflow id as
    annotations instead (``annotation.weft_trace = "..."`` finds all of a run's drives).
    Attempt subsegments are attached to their drive's subsegment explicitly (X-Ray's own
    current subsegment is per thread, and parallel attempts end in any order).
    """

    def __init__(self, tracer: Any) -> None:
        models = importlib.import_module("aws_xray_sdk.core.models.subsegment")
        self._tracer, self._subsegment, self._drives = tracer, models.Subsegment, _Drives()

    def new_traceparent(self) -> str:
        return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"

    def drive(
        self, workflow_id: str, traceparent: str, attributes: Attributes, run: Callable[[], T]
    ) -> T:
        name = f"## weft drive {attributes['weft.workflow_type']}"
        with self._tracer.provider.in_subsegment(name=name) as segment:
            _annotate(segment, attributes)
            segment.put_annotation("weft_trace", traceparent.split("-")[1])
            previous = self._drives.open(workflow_id, segment, attributes["weft.workflow_type"])
            try:
                status = run()
                segment.put_annotation("weft_outcome", "gone" if status is None else str(status))
                return status
            finally:
                self._drives.close(workflow_id, previous)

    def attempt_started(self, workflow_id: str, name: str, attributes: Attributes) -> Any:
        parent, workflow_type = self._drives.parent_of(workflow_id)
        if parent is None:
            return None  # no drive to hang it on (a finalizer run outside one)
        span = self._subsegment(name, "local", parent.parent_segment)
        span.sampled = parent.sampled
        parent.add_subsegment(span)
        _annotate(span, {**attributes, "weft.workflow_type": workflow_type})
        return span

    def attempt_ended(self, span: Any, outcome: str, error_type: str = "") -> None:
        if span is None:
            return
        span.put_annotation("weft_outcome", outcome)
        if error_type:
            span.put_annotation("weft_error_type", error_type)
            span.add_error_flag()
        span.close()


def _annotate(segment: Any, attributes: Attributes) -> None:
    for key, value in attributes.items():
        segment.put_annotation(key.replace(".", "_"), value)  # X-Ray keys: letters, _, digits
