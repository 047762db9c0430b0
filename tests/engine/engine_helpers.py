"""Shared helpers for the engine scenario suite: engines on any backend, and stored-record readers.

Every engine test builds its ``TestEngine`` on ``storage_factory()`` (the backend registry in
``tests/conftest.py``), so a new backend joins the suite by registration alone. The readers
below look at the store directly, to pin what was (or was not) written, independently of the
engine's own view.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from weft_serverless import MaintenanceReport, WorkflowContext, WorkflowDefinition, workflow
from weft_serverless.codec import decode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put, Storage
from weft_serverless.testing import DEFAULT_START, CrashingStorage, TestEngine

Opener = Callable[[], Storage]

T0 = DEFAULT_START
"""The virtual clock's start: every ``TestEngine`` built here begins at this instant."""


def make_engine(
    storage_factory: Opener,
    workflows: Mapping[str, WorkflowDefinition],
    **options: Any,
) -> TestEngine:
    """A manual ``TestEngine`` on a fresh handle of this test's store."""
    return TestEngine(workflows, storage=storage_factory(), **options)


def advance_to(te: TestEngine, moment: float) -> MaintenanceReport:
    """Move the virtual clock to ``moment`` (never backwards) and run one maintenance pass."""
    return te.advance(max(0.0, moment - te.clock()))


def op_records(
    storage: Storage, workflow_id: str, *, branches: bool = False
) -> list[dict[str, Any]]:
    """The stored op log of a workflow, in step order (top-level steps unless ``branches``)."""
    out: list[dict[str, Any]] = []
    for sort, value in storage.scan(keys.workflow_partition(workflow_id), keys.OP_PREFIX):
        slot = sort[len(keys.OP_PREFIX) :]
        if branches or "." not in slot:
            out.append({"slot": slot, **decode(value)})
    return out


def op_signatures(storage: Storage, workflow_id: str) -> list[str]:
    """The signatures of a workflow's top-level steps, in order."""
    return [record["sig"] for record in op_records(storage, workflow_id)]


def buffered_signals(storage: Storage, workflow_id: str, name: str | None = None) -> list[Any]:
    """Decoded payloads of the signals still buffered for a workflow, oldest first."""
    prefix = keys.SIGNAL_PREFIX if name is None else keys.signal_prefix(name)
    return [
        decode(decode(value)["v"])
        for _, value in storage.scan(keys.workflow_partition(workflow_id), prefix)
    ]


def stored_timers(storage: Storage) -> list[tuple[float, str]]:
    """Every durable timer in the store as ``(due, workflow_id)``, across all shards."""
    out: list[tuple[float, str]] = []
    for shard in range(keys.TIMER_SHARDS):
        for sort, value in storage.scan(keys.timer_partition(shard)):
            out.append((keys.timer_due_of(sort), decode(value)["wf"]))
    return sorted(out)


def workflow_keys(storage: Storage, workflow_id: str) -> list[str]:
    """Sort keys of everything stored in a workflow's partition."""
    return [sort for sort, _ in storage.scan(keys.workflow_partition(workflow_id))]


class WriteLog(CrashingStorage):
    """A ``CrashingStorage`` that also keeps the ops of every write, in order (1-based via n-1).

    Used on a crash-free reference run to learn which write carries which step.
    """

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.log: list[list[Op]] = []

    def _batch(self, ops: Sequence[Op]) -> None:
        self.log.append(list(ops))
        super()._batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self.log.append(list(ops))
        return super()._conditional_batch(conditions, ops)

    def puts(self, write: int) -> list[Key]:
        """Keys put by write number ``write`` (1-based)."""
        return [op.key for op in self.log[write - 1] if isinstance(op, Put)]

    def deletes(self, write: int) -> list[Key]:
        """Keys deleted by write number ``write`` (1-based)."""
        return [op.key for op in self.log[write - 1] if isinstance(op, Delete)]

    def write_putting(self, key: Key) -> int:
        """The 1-based number of the first write that put ``key``."""
        for index, ops in enumerate(self.log, start=1):
            if any(isinstance(op, Put) and op.key == key for op in ops):
                return index
        raise AssertionError(f"no write put {key!r}")


# -- the shard-count tests' workload ---------------------------------------------------------


def _order(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, str]:
    yield ctx.sleep("5s")
    yield ctx.wait_for_signal("ship")
    return "shipped"


ORDER = workflow("order", search_attributes={"customer": str}).execute(_order)
"""A run that puts an item in every hash-sharded index: a timer, status and attribute
entries, a claim while driven, and outbox events."""


class FixedSink:
    """An event sink that accepts every event (outbox items leave their shards at the next
    pass) or refuses every one (they stay where the commits put them)."""

    max_batch = 10
    max_bytes = 256 * 1024

    def __init__(self, accept: bool) -> None:
        self.accept = accept

    def publish(self, events: Sequence[Mapping[str, Any]]) -> list[bool]:
        return [self.accept] * len(events)

    def size_of(self, event: Mapping[str, Any]) -> int:
        return 100
