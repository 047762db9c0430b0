"""A run as its page shows it: the inspection and the event log joined into timeline rows.

The engine's read model (``inspect_workflow``) knows each step slot's state, and its event
log knows when signals, updates and children arrived. The page needs both on one
row, plus where on the run's span each step sits, so the Gantt-like bars are plain CSS
percentages computed here, on the server, and no script draws anything.

Only committed times are stored (ADR 0032): a step's start is not, so a step is taken to
start when the step before it committed (or the run started), which is when the workflow
code yielded it, or when a retry of the run last ran it again (the time the run sat failed
is not the step's). Branches of an ``all``/``race`` start with their parent step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weft_serverless import (
    Engine,
    ReplayView,
    TimelineStep,
    Waiting,
    WorkflowDescription,
    WorkflowInspection,
    inspect_workflow,
    replay_view,
)

MIN_BAR_PERCENT = 0.6
"""A step that took no measurable time still gets a sliver of bar, so it can be seen."""
EVENT_LIMIT = 1000
"""Events read for one page (the engine's largest page); a run with more shows the first."""


@dataclass(frozen=True, slots=True)
class Bar:
    """Where a step's bar sits on the run's span, in percent of it."""

    left: float
    width: float
    open: bool  # still going: drawn up to now
    due: float | None = None  # where its timer or retry falls due


@dataclass(slots=True)
class Row:
    """One timeline row: the step, its failed attempts, its time and its bar."""

    step: TimelineStep
    depth: int
    started_at: float
    ended_at: float | None
    bar: Bar
    attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def activity(self) -> str | None:
        """The activity a ``run:<name>`` step runs."""
        operation = self.step.operation
        return operation[len("run:") :] if operation.startswith("run:") else None

    @property
    def note(self) -> str:
        """The inspection's one-line detail, less what the row shows in its own lines: a
        retrying step's failed attempts and due time, and its heartbeat."""
        step = self.step
        if step.status == "retrying" and self.attempts:
            return ""
        detail = step.detail
        if step.heartbeat is not None:
            beat = step.heartbeat
            said = f"heartbeat of attempt {beat['attempt']}: {beat['details']!r}"
            detail = detail.replace(f"; {said}", "").replace(said, "")
        return detail

    @property
    def duration(self) -> float | None:
        return None if self.ended_at is None else max(0.0, self.ended_at - self.started_at)


@dataclass(frozen=True, slots=True)
class RunView:
    """Everything the run page renders, read at ``now`` (engine time)."""

    inspection: WorkflowInspection
    rows: tuple[Row, ...]
    events: tuple[dict[str, Any], ...]
    now: float
    span_start: float
    span_end: float
    replay: ReplayView | None = None  # each step's values and what the run waits for

    @property
    def run(self) -> WorkflowDescription:
        return self.inspection.description

    @property
    def waiting(self) -> Waiting | None:
        """What the run waits for now, where the console has its code."""
        return None if self.replay is None else self.replay.waiting

    @property
    def terminal(self) -> bool:
        return self.run.is_terminal

    @property
    def events_cut(self) -> bool:
        """Only the first ``EVENT_LIMIT`` events are shown (``weft events`` pages the rest)."""
        return len(self.events) >= EVENT_LIMIT

    @property
    def settled(self) -> bool:
        """Nothing more will change on its own: it ended, and its teardown (if any) is done."""
        teardown = self.run.teardown
        return self.terminal and (teardown is None or teardown.get("status") == "completed")


def read_run(engine: Engine, workflow_id: str) -> RunView:
    """The run's view: its state, its partition, its events and its replay, each read once
    (the page's cost does not grow with the number of runs in the store). Raises
    ``WorkflowNotFoundError``."""
    inspection = inspect_workflow(engine, workflow_id)
    events = tuple(engine.events(workflow_id, limit=EVENT_LIMIT))
    replay = replay_view(engine, workflow_id)  # a read-only replay where the code is known
    now = engine.runtime.clock()
    return build(inspection, events, now, replay)


def build(
    inspection: WorkflowInspection,
    events: tuple[dict[str, Any], ...],
    now: float,
    replay: ReplayView | None = None,
) -> RunView:
    """Join the inspection and the events into rows placed on the run's span."""
    run = inspection.description
    steps = inspection.history.steps
    start = run.created_at
    terminal = run.is_terminal
    committed = [s.committed_at for s in steps if s.committed_at is not None]
    due = [s.due_at for s in steps if s.due_at is not None and not s.committed]
    end = max([run.updated_at, *committed] if terminal else [now, *committed, *due])
    span = max(end - start, 1e-9)
    attempts: dict[str, list[dict[str, Any]]] = {}
    for failure in inspection.history.failed_attempts:
        attempts.setdefault(str(failure.get("slot")), []).append(failure)
    commits = {s.index: s.committed_at for s in steps if not s.branch and s.committed_at}
    rows = []
    for step in steps:
        before = [at for index, at in commits.items() if index < step.index]
        began = max([start, *before, *([step.retried_at] if step.retried_at else [])])
        ended = step.committed_at
        stop = ended if ended is not None else (end if terminal else now)
        left = min(100.0 - MIN_BAR_PERCENT, max(0.0, (began - start) / span * 100))
        width = max(MIN_BAR_PERCENT, min(100.0 - left, (stop - began) / span * 100))
        mark = None
        if step.due_at is not None and not step.committed and not terminal:
            mark = round(min(100.0, max(0.0, (step.due_at - start) / span * 100)), 2)
        rows.append(
            Row(
                step=step,
                depth=step.slot.count("."),
                started_at=began,
                ended_at=ended,
                bar=Bar(round(left, 2), round(width, 2), ended is None and not terminal, mark),
                attempts=attempts.get(step.slot, []),
            )
        )
    return RunView(inspection, tuple(rows), events, now, start, end, replay)
