"""Transient storage faults for liveness tests: a wrapper that refuses chosen writes once.

``FlakyStorage`` stands for a backend that fails a request and recovers (SQLite busy past its
timeout, DynamoDB's retry budget spent): the chosen write raises ``StorageUnavailableError``
with nothing applied, and every later write goes through. It wraps any backend, so a test
proves the same on every one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.errors import StorageUnavailableError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put, Storage
from weft_serverless.testing import CrashingStorage

Match = Callable[[Sequence[Op]], bool]


class FlakyStorage(CrashingStorage):
    """Fails, once each, the first write matching each armed rule (nothing of it applied)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.rules: list[Match] = []
        self.failures = 0

    def fail_once(self, match: Match) -> None:
        self.rules.append(match)

    def _maybe_fail(self, ops: Sequence[Op]) -> None:
        for rule in self.rules:
            if rule(ops):
                self.rules.remove(rule)
                self.failures += 1
                raise StorageUnavailableError("injected transient fault: the write was not applied")

    def _batch(self, ops: Sequence[Op]) -> None:
        self._maybe_fail(ops)
        super()._batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self._maybe_fail(ops)
        return super()._conditional_batch(conditions, ops)


def step_commit(workflow_id: str, step: int) -> Match:
    """Matches the write committing top-level step ``step`` (counted from 1) of a workflow:
    a put of its op record, or, on a run with a head (ADR 0037), the head put that carries
    it as the newest step (its write-out, which may travel after the head put and is sent
    again when it fails, ADR 0057, commits nothing)."""
    slot = keys.step_slot(step - 1)
    key, head = keys.op_key(workflow_id, slot), keys.owner_head_key(workflow_id)

    def match(ops: Sequence[Op]) -> bool:
        return any(
            isinstance(op, Put)
            and (op.key == key or (op.key == head and Head.from_bytes(op.value).slot == slot))
            for op in ops
        )

    return match
