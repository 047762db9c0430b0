"""The history circuit breaker: a run commits at most ``max_history`` step records.

What is counted is the run's committed step records (its ``op#`` records: one per top-level
step, plus one per branch of ``ctx.all`` / ``ctx.race`` that commits its own). Pending
facts, retry records, buffered signals, update and version records are not steps and are
not counted. The check runs before a new step is carried out, so the step that would
exceed the bound runs nothing (no activity, no signal consumed) and the run fails with
``HistoryLimitExceededError``; it runs again just before a step record is written, which
catches a composite step whose branches filled the last places.

The count comes from the history the drive already holds, so the check costs no request.
"""

from __future__ import annotations

from weft_serverless.engine.persistence.records import History
from weft_serverless.errors import HistoryLimitExceededError
from weft_serverless.workflow import WorkflowDefinition


def check(history: History, definition: WorkflowDefinition) -> None:
    """Raise ``HistoryLimitExceededError`` if one more step record would exceed the bound."""
    limit = definition.max_history
    if limit is None:
        return
    count = len(history.ops)
    if count >= limit:
        raise HistoryLimitExceededError(history.state.id, count, limit)
