"""Spans for drives and activity attempts, on an OpenTelemetry tracer or powertools' ``Tracer``.

Optional by construction: nothing here imports a tracing library until ``adapt`` is given a
tracer, and with none the engine's only cost is one ``if rt.tracer is None`` per drive and
per attempt.

A run spans many invocations, so its trace context lives in the run's state: the start
batch stores the W3C ``traceparent`` of the run's ``weft start`` span (ended at once, a
child of the caller's span when one is current), flags included, so every drive on any
engine, after any crash, is a child of an exported span and honours the sampling decision
taken once at the start. Attempt spans name their drive's span as parent explicitly
(``parent_of``), and the activity runs with its attempt's span current, in whichever thread
or event-loop task runs it (ADR 0042). Tracing never fails a drive.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Any, Literal, Protocol, TypeVar

from weft_serverless.engine.persistence.records import FAILED, TIMED_OUT
from weft_serverless.engine.process.telemetry import logger
from weft_serverless.errors import InvalidArgumentError

TRACE_FIELD = "trace"
"""The state's extra field holding the run's ``traceparent``."""

T = TypeVar("T")

Attributes = Mapping[str, str | int | float | bool]

RunsOn = Literal["drive", "thread", "task"]
"""Where an attempt runs: inline on its drive's thread, on an activity thread, or as a task
on the engine's event loop (``async def``)."""

_FAILING = frozenset({FAILED, TIMED_OUT})
"""A drive that leaves its run in one of these ended in error."""


class Tracing(Protocol):
    """What the engine asks of a tracer, whichever library is behind it."""

    def new_traceparent(self, workflow_id: str, workflow_type: str) -> str: ...

    def samples_root(self, trace_id: int) -> bool: ...

    def drive(
        self, workflow_id: str, traceparent: str, attributes: Attributes, run: Callable[[], T]
    ) -> T: ...

    def attempt_started(
        self, workflow_id: str, name: str, attributes: Attributes, runs_on: RunsOn
    ) -> Any: ...

    def activated(self, span: Any) -> AbstractContextManager[object]: ...

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


def traceparent_of(
    tracing: Tracing, state_extra: Mapping[str, Any], workflow_id: str, created_at: float
) -> str:
    """The run's stored trace context, or one derived from the run itself (a run stored
    before tracing was on): the same ids on every engine, so its drives still share a trace,
    and sampled as the tracer's root sampler decides for that trace id."""
    stored = state_extra.get(TRACE_FIELD)
    if isinstance(stored, str) and parse(stored) is not None:
        return stored
    import hashlib  # only with a tracer: hashlib's import is a cold-start cost

    digest = hashlib.sha256(f"{workflow_id}\0{created_at!r}".encode()).hexdigest()
    flags = "01" if tracing.samples_root(int(digest[:32], 16)) else "00"
    return f"00-{digest[:32]}-{digest[32:48]}-{flags}"


def parse(traceparent: str) -> tuple[int, int, int] | None:
    """A ``traceparent``'s trace id, span id and flags (None: not one)."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    return (trace_id, span_id, flags) if trace_id and span_id else None


def _random_traceparent(sampled: bool) -> str:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-{'01' if sampled else '00'}"


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
    """Spans on an OpenTelemetry tracer (``opentelemetry-api`` is imported here, lazily).

    The API promises never to raise into its caller, so its calls are not guarded here.
    """

    def __init__(self, tracer: Any) -> None:
        try:
            trace = importlib.import_module("opentelemetry.trace")
        except ImportError:
            raise InvalidArgumentError(
                "tracer looks like an OpenTelemetry tracer but opentelemetry-api is not "
                "installed; install it, or pass powertools' Tracer()"
            ) from None
        self._tracer, self._trace, self._drives = tracer, trace, _Drives()

    def new_traceparent(self, workflow_id: str, workflow_type: str) -> str:
        """The context of the run's ``weft start`` span: ended at once, a child of the
        caller's span when one is current, and sampled as the tracer's sampler decides."""
        span = self._tracer.start_span(
            f"weft start {workflow_type}",
            attributes={"weft.workflow_id": workflow_id, "weft.workflow_type": workflow_type},
        )
        span.end()
        context = span.get_span_context()
        if not context.is_valid:  # a no-op tracer: nothing recorded the start
            return _random_traceparent(sampled=False)
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def samples_root(self, trace_id: int) -> bool:
        """What the SDK's sampler decides for a root span of ``trace_id`` (sampled when the
        tracer does not say: an API-only tracer records nothing anyway)."""
        should_sample = getattr(getattr(self._tracer, "sampler", None), "should_sample", None)
        if should_sample is None:
            return True
        return bool(should_sample(None, trace_id, "weft start").decision.is_sampled())

    def drive(
        self, workflow_id: str, traceparent: str, attributes: Attributes, run: Callable[[], T]
    ) -> T:
        trace = self._trace
        ids = parse(traceparent)
        context = None
        if ids is not None:
            trace_id, span_id, flags = ids
            remote = trace.SpanContext(
                trace_id=trace_id,
                span_id=span_id,
                is_remote=True,
                trace_flags=trace.TraceFlags(flags),  # the start's sampling decision
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
            if status in _FAILING:
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"the run {status}"))
            return status
        finally:
            self._drives.close(workflow_id, previous)
            span.end()

    def attempt_started(
        self, workflow_id: str, name: str, attributes: Attributes, runs_on: RunsOn
    ) -> Any:
        parent, workflow_type = self._drives.parent_of(workflow_id)
        context = None if parent is None else self._trace.set_span_in_context(parent)
        named = dict(attributes)
        if workflow_type is not None:
            named["weft.workflow_type"] = workflow_type
        return self._tracer.start_span(
            name, context=context, attributes=named, start_time=time.time_ns()
        )

    def activated(self, span: Any) -> AbstractContextManager[object]:
        """``span`` current in this thread or task: spans opened inside nest under it."""
        return self._trace.use_span(  # type: ignore[no-any-return]
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    def attempt_ended(self, span: Any, outcome: str, error_type: str = "") -> None:
        span.set_attribute("weft.outcome", outcome)
        if error_type:
            span.set_attribute("weft.error_type", error_type)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error_type))
        span.end()


class _XRayAttempt:
    """An attempt's subsegment and how it is current: ``begun`` on the drive's thread's
    stack, set as the ``thread``'s entity while it runs, or only ``attached`` to its drive."""

    __slots__ = ("how", "subsegment")

    def __init__(self, subsegment: Any, how: Literal["begun", "thread", "attached"]) -> None:
        self.subsegment, self.how = subsegment, how


class XRayTracing:
    """Subsegments on powertools' ``Tracer`` (X-Ray).

    Inside Lambda, X-Ray owns the invocation's trace id, so a drive cannot join a stored
    trace; each drive's subsegment carries the run's trace id and workflow id as
    annotations instead (``annotation.weft_trace = "..."`` finds all of a run's drives).
    X-Ray's current entity is per thread: an inline attempt's subsegment is begun on the
    drive's thread (so it is current there), one on an activity thread is attached to its
    drive's subsegment explicitly and made that thread's entity while it runs; an
    ``async def`` attempt's is attached but not made current (the event loop's thread is
    shared by every async attempt).
    With no segment open (a plain process, a background thread) the recorder's
    ``context_missing`` strategy reports it and the drive runs untraced.
    """

    def __init__(self, tracer: Any) -> None:
        models = importlib.import_module("aws_xray_sdk.core.models.subsegment")
        self._recorder = tracer.provider  # X-Ray's recorder (powertools' default provider)
        self._subsegment, self._drives = models.Subsegment, _Drives()

    def new_traceparent(self, workflow_id: str, workflow_type: str) -> str:
        return _random_traceparent(sampled=True)  # X-Ray samples per invocation, not per run

    def samples_root(self, trace_id: int) -> bool:
        return True

    def drive(
        self, workflow_id: str, traceparent: str, attributes: Attributes, run: Callable[[], T]
    ) -> T:
        name = f"## weft drive {attributes['weft.workflow_type']}"
        with ExitStack() as stack:
            try:
                segment = stack.enter_context(self._recorder.in_subsegment(name=name))
            except Exception as exc:  # context_missing="RUNTIME_ERROR", or any other failure
                logger.warning(
                    "not tracing a drive of %s: %s: %s", workflow_id, type(exc).__name__, exc
                )
                segment = None
            if segment is None:  # no segment open: context_missing has said so, carry on
                return run()
            _annotate(segment, attributes)
            segment.put_annotation("weft_trace", traceparent.split("-")[1])
            previous = self._drives.open(workflow_id, segment, attributes["weft.workflow_type"])
            try:
                status = run()
            except BaseException:
                segment.put_annotation("weft_outcome", "error")  # the exception is added on exit
                raise
            else:
                segment.put_annotation("weft_outcome", "gone" if status is None else str(status))
                if status in _FAILING:
                    segment.add_error_flag()
                return status
            finally:
                self._drives.close(workflow_id, previous)

    def attempt_started(
        self, workflow_id: str, name: str, attributes: Attributes, runs_on: RunsOn
    ) -> Any:
        parent, workflow_type = self._drives.parent_of(workflow_id)
        if parent is None:
            return None  # no traced drive to hang it on (untraced, or a finalizer outside one)
        recorder = self._recorder
        if runs_on == "drive" and recorder.current_subsegment() is parent:
            subsegment = recorder.begin_subsegment(name)  # the drive's child, current here
            how: Literal["begun", "thread", "attached"] = "begun"
        else:  # another thread or task, or nothing current here (the SDK is disabled)
            subsegment = self._subsegment(name, "local", parent.parent_segment)
            subsegment.sampled = parent.sampled
            parent.add_subsegment(subsegment)
            how = "thread" if runs_on == "thread" else "attached"
        _annotate(subsegment, {**attributes, "weft.workflow_type": workflow_type})
        return _XRayAttempt(subsegment, how)

    def activated(self, span: Any) -> AbstractContextManager[object]:
        if span.how != "thread":
            return nullcontext()  # begun: current already; attached: the loop's thread is shared
        return self._current_in_thread(span.subsegment)

    @contextmanager
    def _current_in_thread(self, subsegment: Any) -> Iterator[None]:
        """X-Ray's documented way for a worker thread: set its entity, clear it after."""
        self._recorder.set_trace_entity(subsegment)
        try:
            yield
        finally:
            self._recorder.clear_trace_entities()

    def attempt_ended(self, span: Any, outcome: str, error_type: str = "") -> None:
        subsegment = span.subsegment
        subsegment.put_annotation("weft_outcome", outcome)
        if error_type:
            subsegment.put_annotation("weft_error_type", error_type)
            subsegment.add_error_flag()
        if span.how == "begun" and self._recorder.current_subsegment() is subsegment:
            self._recorder.end_subsegment()  # closes it and takes it off this thread's stack
        else:
            subsegment.close()


def _annotate(segment: Any, attributes: Attributes) -> None:
    for key, value in attributes.items():
        segment.put_annotation(key.replace(".", "_"), value)  # X-Ray keys: letters, _, digits
