"""Test harness: a manual engine on a virtual clock, activity mocks, and crash injection.

``TestEngine`` never sleeps: ``advance(seconds)`` moves the clock and runs one maintenance
pass, which fires whatever fell due. ``crash()`` drops every in-memory object and
``recover()`` rebuilds an engine from storage alone, as a new process would.
``moto_dynamodb()`` runs a test against an in-process DynamoDB that is safe under the
engine's threads (``weft_serverless.testing_moto``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.engine.engine import Engine
from weft_serverless.engine.handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from weft_serverless.engine.maintenance import MaintenanceReport
from weft_serverless.engine.process.timer_hints import TimerHint
from weft_serverless.storage.base import (
    Capabilities,
    ClockOffset,
    Condition,
    Key,
    Op,
    SortRange,
    Storage,
)
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing_moto import MotoDynamoDB, moto_dynamodb, serialise_moto
from weft_serverless.workflow import WorkflowDefinition

__all__ = [
    "CrashingStorage",
    "DelegatingStorage",
    "MockActivity",
    "MotoDynamoDB",
    "RecordingTimerHints",
    "SimulatedCrash",
    "TestEngine",
    "VirtualClock",
    "moto_dynamodb",
    "serialise_moto",
]

DEFAULT_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: far from the epoch, fixed for tests


class SimulatedCrash(BaseException):
    """Raised by ``CrashingStorage`` to stand for the process dying at that write.

    A ``BaseException`` so that no ``except Exception`` in the engine or in user code can
    swallow it, exactly like a real crash.
    """


class VirtualClock:
    """A settable clock; the engine reads it through ``Engine.create(clock=...)``."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += seconds
            return self._now


class DelegatingStorage(Storage):
    """Passes every call to ``inner``: the base of test wrappers that inject crashes, faults
    or hooks, each overriding only the calls it changes."""

    def __init__(self, inner: Storage) -> None:
        super().__init__()
        self.inner = inner

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    def clock_offset(self) -> ClockOffset | None:
        return self.inner.clock_offset()

    def _get(self, key: Key) -> bytes | None:
        return self.inner.get(key)

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        return self.inner.scan(
            partition,
            gt=rng.low if rng.low is not None and not rng.low_inclusive else None,
            gte=rng.low if rng.low is not None and rng.low_inclusive else None,
            lt=rng.high if rng.high is not None and not rng.high_inclusive else None,
            lte=rng.high if rng.high is not None and rng.high_inclusive else None,
            limit=limit,
            reverse=reverse,
        )

    def _batch(self, ops: Sequence[Op]) -> None:
        self.inner.batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        return self.inner.conditional_batch(conditions, ops)


class CrashingStorage(DelegatingStorage):
    """Wraps a storage and raises ``SimulatedCrash`` before or after its Nth write.

    A write is one ``batch`` or ``conditional_batch`` call (``put`` and ``delete`` are
    batches). ``writes`` counts every write attempted so far, so a test can first measure
    how many writes a scenario makes, then crash at each of them in turn.
    """

    def __init__(
        self,
        inner: Storage,
        *,
        crash_before_write: int | None = None,
        crash_after_write: int | None = None,
    ) -> None:
        super().__init__(inner)
        self.crash_before_write = crash_before_write
        self.crash_after_write = crash_after_write
        self.writes = 0
        self.crashed = False
        self._numbering = threading.Lock()

    def _write(self, apply: Callable[[], bool]) -> bool:
        # A parallel pass writes from several threads (ADR 0055), and a step's write-out
        # travels beside its head put (ADR 0057): each write gets its own number.
        with self._numbering:
            self.writes += 1
            number = self.writes
        if self.crash_before_write == number:
            self.crashed = True
            raise SimulatedCrash(f"crash before write {number}")
        ok = apply()
        if self.crash_after_write == number:
            self.crashed = True
            raise SimulatedCrash(f"crash after write {number}")
        return ok

    def _batch(self, ops: Sequence[Op]) -> None:
        def apply() -> bool:
            self.inner.batch(ops)
            return True

        self._write(apply)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        return self._write(lambda: self.inner.conditional_batch(conditions, ops))


@dataclass
class MockActivity:
    """Stands in for an activity: records every call, then returns, raises, or delegates."""

    name: str
    impl: Callable[..., Any] | None = None
    returns: Any = None
    raises: BaseException | None = None
    calls: list[Any] = field(default_factory=list)

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def __call__(self, arg: Any = None) -> Any:
        self.calls.append(arg)
        if self.raises is not None:
            raise self.raises
        if self.impl is not None:
            return self.impl(arg)
        return self.returns


class RecordingTimerHints:
    """A timer hint port that keeps what it is sent (``failing``: every send raises)."""

    def __init__(self, horizon: float = 900.0, *, failing: bool = False) -> None:
        self.horizon = horizon
        self.failing = failing
        self.sent: list[TimerHint] = []
        self.batches: list[int] = []

    def send(self, hints: Sequence[TimerHint]) -> None:
        if self.failing:
            raise ConnectionError("hint queue unreachable")
        self.batches.append(len(hints))
        self.sent.extend(hints)

    def take(self) -> list[TimerHint]:
        """The hints sent since the last ``take``, as a worker would receive them."""
        taken, self.sent = self.sent, []
        return taken


class TestEngine:
    """A manual engine on a virtual clock, rebuilt from storage at will.

    Every ``Engine`` method not defined here is forwarded to the current engine.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        workflows: Mapping[str, WorkflowDefinition],
        *,
        storage: Storage | None = None,
        clock: VirtualClock | None = None,
        **engine_options: Any,
    ) -> None:
        self.workflows = dict(workflows)
        self.storage = storage if storage is not None else MemoryStorage()
        self.clock = clock or VirtualClock()
        self.mocks: dict[str, MockActivity] = {}
        # A virtual clock is apart from the store's on purpose: no skew check unless asked.
        engine_options.setdefault("max_clock_skew", math.inf)
        self._engine_options = engine_options
        self._engine: Engine | None = self._build(self.storage)

    def _build(self, storage: Storage) -> Engine:
        return Engine.create(
            storage,
            self.workflows,
            background_tasks="manual",
            clock=self.clock,
            activities=self.mocks,
            **self._engine_options,
        )

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("the engine crashed; call recover() first")
        return self._engine

    def mock(
        self,
        activity: str,
        impl: Callable[..., Any] | None = None,
        *,
        returns: Any = None,
        raises: BaseException | None = None,
    ) -> MockActivity:
        """Replace an activity (in every workflow) by a recording mock."""
        mock = MockActivity(activity, impl, returns, raises)
        self.mocks[activity] = mock
        return mock

    def advance(self, seconds: float) -> MaintenanceReport:
        """Move virtual time forward and fire what fell due (one maintenance pass)."""
        self.clock.advance(seconds)
        return self.engine.run_maintenance()

    def crash(self) -> None:
        """Drop the engine without any cleanup, as if the process died."""
        self._engine = None

    def recover(self, storage: Storage | None = None) -> Engine:
        """Build a fresh engine from storage (optionally a new handle on it) and recover."""
        if storage is not None:
            self.storage = storage
        self._engine = self._build(self.storage)
        return self._engine

    # Typed forwards of the common calls, for readable tests.
    def start(self, workflow_type: str, input: Any = None, **options: Any) -> WorkflowHandle:
        return self.engine.start(workflow_type, input, **options)

    def signal(self, workflow_id: str, name: str, payload: Any = None, **options: Any) -> None:
        self.engine.signal(workflow_id, name, payload, **options)

    def describe(self, workflow_id: str, *, attempts: bool = False) -> WorkflowDescription:
        return self.engine.describe(workflow_id, attempts=attempts)

    def list(self, **filters: Any) -> list[WorkflowSummary]:
        return self.engine.list(**filters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)
