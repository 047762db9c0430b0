"""Shared helpers for the feature suite: engines on any backend, crash points, store snapshots.

Every feature test builds its engine on ``storage_factory()`` (the backend registry in
``tests/conftest.py``), so each runs on memory, SQLite and DynamoDB (moto). A crash is
injected with ``KeyCrash``: it wraps one handle and raises ``SimulatedCrash`` just before or
just after the first write that puts a key the test names, so a test says *where* it crashes
("after the update's record lands") rather than counting writes. Recovery always happens in a
fresh engine on a fresh handle of the same store (for SQLite a reopened file: a restart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from weft_serverless import Engine, WorkflowDefinition
from weft_serverless.codec import decode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Key, Op, Put, Storage
from weft_serverless.testing import DEFAULT_START, CrashingStorage, SimulatedCrash, TestEngine

Opener = Callable[[], Storage]
KeyMatch = Callable[[Key], bool]

T0 = DEFAULT_START
"""The virtual clock's start instant."""


# -- engines ---------------------------------------------------------------------------------


def make_engine(
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition],
    **options: Any,
) -> TestEngine:
    """A manual ``TestEngine`` on a fresh handle of this test's store."""
    return TestEngine(workflows, storage=storage_factory(), **options)


def crashable_engine(
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition],
    **options: Any,
) -> tuple[TestEngine, KeyCrash]:
    """A ``TestEngine`` whose handle can be armed to crash at a named write."""
    crashing = KeyCrash(storage_factory())
    return TestEngine(workflows, storage=crashing, **options), crashing


def recover_fresh(
    te: TestEngine,
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition] | None = None,
) -> Engine:
    """Drop ``te``'s engine as a dead process would, then rebuild it on a fresh handle.

    ``workflows`` replaces the registered definitions first (a redeploy with new code).
    """
    te.crash()
    if workflows is not None:
        te.workflows = dict(workflows)
    return te.recover(storage_factory())


@contextmanager
def expect_crash() -> Iterator[None]:
    """The block must end in ``SimulatedCrash`` (the armed write was reached)."""
    try:
        yield
    except SimulatedCrash:
        return
    raise AssertionError("the armed crash point was never reached")


# -- crash points ----------------------------------------------------------------------------


def puts_prefix(prefix: str, workflow_id: str | None = None) -> KeyMatch:
    """Match a put of a workflow-partition key whose sort key starts with ``prefix``."""
    partition = None if workflow_id is None else keys.workflow_partition(workflow_id)

    def match(key: Key) -> bool:
        return key.sort.startswith(prefix) and (partition is None or key.partition == partition)

    return match


def puts_op(workflow_id: str, step: int) -> KeyMatch:
    """Match the put of top-level step ``step``'s op record (the step's commit)."""
    target = keys.op_key(workflow_id, keys.step_slot(step))
    return lambda key: key == target


def puts_state(workflow_id: str) -> KeyMatch:
    """Match a put of the workflow's state record (a status transition)."""
    target = keys.state_key(workflow_id)
    return lambda key: key == target


class KeyCrash(CrashingStorage):
    """A ``CrashingStorage`` armed by key: crash around the first write putting a matching key.

    ``arm(match, after=True)`` crashes right after that write is applied (the write is
    durable, the caller never learns it); ``after=False`` crashes right before it (nothing of
    it is stored). Writes that do not match pass through untouched.
    """

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self._match: KeyMatch | None = None
        self._after = True

    def arm(self, match: KeyMatch, *, after: bool = True) -> None:
        self._match, self._after = match, after

    def _trigger(self, ops: Sequence[Op]) -> None:
        if self._match is None or self.crashed:
            return
        if any(isinstance(op, Put) and self._match(op.key) for op in ops):
            if self._after:
                self.crash_after_write = self.writes + 1
            else:
                self.crash_before_write = self.writes + 1
            self._match = None

    def _batch(self, ops: Sequence[Op]) -> None:
        self._trigger(ops)
        super()._batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self._trigger(ops)
        return super()._conditional_batch(conditions, ops)


# -- reading the store -----------------------------------------------------------------------


Snapshot = dict[str, list[tuple[str, bytes]]]


def snapshot(storage: Storage, workflow_ids: Sequence[str]) -> Snapshot:
    """What a rejected call could have written: the workflows' partitions and the timer index.

    (No backend scans across partitions, so this reads each known partition; the write
    counters of ``WriteCount`` cover everything else.)
    """
    partitions = [keys.workflow_partition(wid) for wid in workflow_ids]
    partitions += [keys.timer_partition(s) for s in range(keys.TIMER_SHARDS)]
    return {p: list(storage.scan(p)) for p in partitions}


@dataclass(frozen=True, slots=True)
class WriteCount:
    """Write counters of one handle, to prove a call wrote nothing."""

    batches: int
    conditional_batches: int
    items_written: int
    items_deleted: int

    @classmethod
    def of(cls, storage: Storage) -> WriteCount:
        s = storage.stats
        return cls(s.batches, s.conditional_batches, s.items_written, s.items_deleted)

    @property
    def items(self) -> tuple[int, int]:
        """Items put and deleted: unchanged means nothing was stored (a refused conditional
        write may still have been attempted)."""
        return self.items_written, self.items_deleted


def op_sigs(storage: Storage, workflow_id: str) -> list[str]:
    """Signatures of a workflow's stored top-level steps, in order."""
    partition = keys.workflow_partition(workflow_id)
    return [
        decode(value)["sig"]
        for sort, value in storage.scan(partition, keys.OP_PREFIX)
        if "." not in sort
    ]


def sorts_with(storage: Storage, workflow_id: str, prefix: str) -> list[str]:
    """Sort keys in a workflow's partition starting with ``prefix``."""
    return [sort for sort, _ in storage.scan(keys.workflow_partition(workflow_id), prefix)]


class Calls:
    """Records activity calls as ``(name, argument)``; ``fn`` builds a recording activity."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def fn(self, name: str, result: Callable[[Any], Any] = lambda x: x) -> Callable[[Any], Any]:
        def activity_fn(arg: Any = None) -> Any:
            self.log.append((name, arg))
            return result(arg)

        activity_fn.__name__ = name
        return activity_fn

    def count(self, name: str) -> int:
        return sum(1 for called, _ in self.log if called == name)

    def names(self) -> list[str]:
        return [name for name, _ in self.log]


def appending(target: list[Any], answer: Callable[[list[Any]], Any] = len) -> Callable[[Any], Any]:
    """A handler that appends its argument to ``target`` and returns ``answer(target)``."""

    def handler(value: Any) -> Any:
        target.append(value)
        return answer(target)

    return handler


@contextmanager
def refused(case: str, error: type[BaseException]) -> Iterator[None]:
    """Like ``pytest.raises(error)`` for one case of a loop: a miss names the ``case``."""
    try:
        yield
    except error:
        return
    except Exception as exc:
        raise AssertionError(f"{case}: raised {exc!r}, expected {error.__name__}") from exc
    raise AssertionError(f"{case}: did not raise {error.__name__}")
