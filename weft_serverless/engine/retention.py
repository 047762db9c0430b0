"""Retention: deleting finished runs once their window has passed, and explicit purges.

A terminal transition writes a ``retention`` timer when a window is configured for its status.
A purge first deletes the state record and its index entry in one conditional batch (rotating
the owner epoch), so the run disappears atomically from ``describe`` and ``list``; the rest of
the partition is then deleted in chunks, and a crash in between is finished by the timer,
which is deleted only after. The owner epoch and the idempotency mapping are never deleted:
the epoch keeps a reused id fenced, the mapping keeps a repeated start from silently running
again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from weft_serverless.commands import parse_duration
from weft_serverless.errors import ConfigurationError, InvalidArgumentError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op

from .records import TERMINAL, WorkflowState
from .runtime import Runtime

PurgeOutcome = Literal["purged", "not-finished", "kept", "raced"]


def parse_retention(retention: Mapping[str, object] | None) -> dict[str, float]:
    """``{"completed": "7d", "failed": "30d", ...}`` -> seconds per terminal status."""
    if retention is None:
        return {}
    if not isinstance(retention, Mapping):
        raise ConfigurationError("retention must map a terminal status to a duration")
    windows: dict[str, float] = {}
    for status, window in retention.items():
        if status not in TERMINAL:
            raise ConfigurationError(
                f"retention key {status!r} is not a terminal status ({', '.join(sorted(TERMINAL))})"
            )
        try:
            seconds = parse_duration(window, f"retention[{status!r}]")  # type: ignore[arg-type]
        except InvalidArgumentError as exc:
            raise ConfigurationError(str(exc)) from None
        if seconds <= 0:
            raise ConfigurationError(f"retention[{status!r}] must be > 0 seconds")
        windows[status] = seconds
    return windows


def purge(rt: Runtime, workflow_id: str, *, when_due: bool = False) -> PurgeOutcome:
    """Delete a finished run; idempotent, and safe to repeat after a crash part-way.

    With ``when_due`` (a retention timer firing) the run is kept unless its current status
    has a window that has passed since it ended: a run retried since then, or ended again
    with another status, is judged by its latest end.
    """
    state_key = keys.state_key(workflow_id)
    current = rt.storage.get(state_key)
    if current is not None:
        state = WorkflowState.from_bytes(current)
        if state.status not in TERMINAL:
            return "not-finished"
        window = rt.retention.get(state.status)
        if when_due and (window is None or rt.now() < state.updated_at + window):
            return "kept"
        rotation = rt.fence.rotate_fragment(workflow_id)
        conditions = [Condition(state_key, current), *rotation.conditions]
        ops: list[Op] = [
            Delete(state_key),
            Delete(keys.status_key(state.status, workflow_id, state.created_at)),
            *rotation.ops,
        ]
        if not rt.storage.conditional_batch(conditions, ops):
            return "raced"
    partition = keys.workflow_partition(workflow_id)
    rest = [
        Key(partition, sort)
        for sort, _ in rt.storage.scan(partition)
        if sort not in (keys.OWNER_EPOCH, keys.STATE)
    ]
    rt.storage.delete_many(rest)
    rt.metrics.incr("workflows_purged")
    return "purged"
