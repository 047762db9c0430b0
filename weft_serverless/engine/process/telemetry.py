"""What the engine tells operators: its logger, process-local counters, and warnings.

The lowest floor of the engine: every module may import it, it imports no engine module.
"""

from __future__ import annotations

import contextvars
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from weft_serverless.errors import WeftError

logger = logging.getLogger("weft_serverless.engine")


class RunFields:
    """The run a drive is driving, for its log lines: the drive fills the type once the
    run is read, and ``step`` is read only when a line is written (nothing per step)."""

    __slots__ = ("step", "workflow_id", "workflow_type")

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self.workflow_type: str | None = None
        self.step: Callable[[], str | None] | None = None


_current_run: contextvars.ContextVar[RunFields | None] = contextvars.ContextVar(
    "weft_current_run", default=None
)


@contextmanager
def run_fields(workflow_id: str) -> Iterator[RunFields]:
    """Log lines written on this thread inside the block carry the run's fields."""
    fields = RunFields(workflow_id)
    token = _current_run.set(fields)
    try:
        yield fields
    finally:
        _current_run.reset(token)


def pin_step(step: Callable[[], str | None]) -> None:
    """Lines written from here on carry the drive's run with ``step`` as their step.

    For an attempt on an activity thread or task, which runs in a copy of its drive's
    context made for it alone (dropped afterwards, so nothing is reset): by the time a line
    is written the drive may be advancing another branch.
    """
    drive = _current_run.get()
    if drive is not None:
        fields = RunFields(drive.workflow_id)
        fields.workflow_type, fields.step = drive.workflow_type, step
        _current_run.set(fields)


class _AddRunFields(logging.Filter):
    """Adds ``workflow_id``, ``workflow_type`` and ``step`` to each record written inside a
    drive, as record attributes: structured fields for any JSON formatter (powertools'
    Logger prints them as keys). A field the call site passed in ``extra`` is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _current_run.get()
        if fields is None:
            return True
        attrs = record.__dict__
        attrs.setdefault("workflow_id", fields.workflow_id)
        if fields.workflow_type is not None:
            attrs.setdefault("workflow_type", fields.workflow_type)
        step = fields.step() if fields.step is not None else None
        if step is not None:
            attrs.setdefault("step", step)
        return True


_ADD_RUN_FIELDS = _AddRunFields()
logger.addFilter(_ADD_RUN_FIELDS)
logging.getLogger("weft_serverless.workflow").addFilter(_ADD_RUN_FIELDS)  # ctx.logger's lines


@dataclass(slots=True)
class Metrics:
    """Process-local counters; the Lambda layer flushes them as EMF."""

    steps_committed: int = 0
    activity_attempts: int = 0
    activity_retries: int = 0
    timers_fired: int = 0
    workflows_completed: int = 0
    workflows_failed: int = 0
    lost_commits: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def incr(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by


def warn(category: type[Warning], message: str, level: int = logging.WARNING) -> None:
    """Emit a warning of ``category`` and log it (routine cases log below WARNING)."""
    logger.log(level, message)
    warnings.warn(message, category, stacklevel=3)


def skip_unsupported(metrics: Metrics, error: WeftError) -> None:
    """A background pass leaves a record of an unknown format as it is: warn, count, go on."""
    metrics.incr("records_skipped_unsupported")
    logger.warning("skipped a record this engine cannot read: %s", error)
