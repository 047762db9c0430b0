"""The operator's read model: one workflow as the store holds it, decoded for people and tools.

``weft show``, the demo and any other operator tool need more than ``Engine.describe``: the
workflow-lease owner and epoch, a timeline of its steps (what committed, what is parked and
why, what is retrying) and its failed attempts. All of that is read from the workflow's
partition, whose key layout and record encoding only the engine knows. This module is the one
place outside the engine's write paths that decodes them, so the layers above (the CLI, the
AWS API, the dev server) read typed values (a step's kind as a word, an owner and its epoch)
through the public names re-exported by ``weft_serverless`` and never touch ``keys`` or
``codec``. It lives inside ``engine/`` because the format it decodes is the engine's.

Everything here only reads: ``read_only_engine`` builds an engine that refuses every write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weft_serverless.codec import decode, jsonable
from weft_serverless.engine.ownership.base import marker_mode
from weft_serverless.engine.persistence import retry_history
from weft_serverless.engine.persistence.records import History, load_history
from weft_serverless.engine.persistence.retry_history import failed_attempts
from weft_serverless.engine.persistence.run_head import Head, holder_record
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.errors import WeftError, WorkflowNotFoundError
from weft_serverless.storage import keys
from weft_serverless.storage.keys.shards import ShardLayout
from weft_serverless.storage.shard_layout import read_marker

if TYPE_CHECKING:
    from weft_serverless.engine.engine import Engine
    from weft_serverless.engine.handle import WorkflowDescription
    from weft_serverless.engine.ownership import Mode
    from weft_serverless.storage.base import Storage
    from weft_serverless.workflow import WorkflowDefinition

TIMER_KINDS: Mapping[str, str] = {
    "s": "sleep",
    "w": "signal wait (timeout)",
    "u": "condition (timeout)",
}
"""What parked on a step timer, by the first letter of the timer's tag (the engine's park
calls choose the letter). The one mapping of tag letters to words outside the engine's
write paths: when the engine keeps one table of timer kinds, point this at it."""


def timer_kind(tag: str) -> str:
    """The word for a step timer's tag (``s#...`` is a sleep); ``timer`` for one not listed."""
    return TIMER_KINDS.get(tag[:1], "timer")


@dataclass(frozen=True, slots=True)
class Holder:
    """The engine that holds a workflow under workflow-lease, and until when."""

    engine_id: str
    epoch: int
    expires_at: float
    claimed_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine_id": self.engine_id,
            "epoch": self.epoch,
            "expires_at": self.expires_at,
        }
        if self.claimed_at is not None:
            out["claimed_at"] = self.claimed_at
        return out


@dataclass(frozen=True, slots=True)
class Owner:
    """A workflow's ownership records: its fencing epoch and its holder (None when released)."""

    epoch: int
    holder: Holder | None

    def as_json(self) -> dict[str, Any]:
        holder = None if self.holder is None else self.holder.as_json()
        return {"holder": holder, "epoch": self.epoch}


@dataclass(slots=True)
class TimelineStep:
    """One row of the timeline: a step slot and what the store knows about it.

    ``step`` is the slot for people (``4 (branch 2)``), ``index`` the top-level step it
    belongs to (0-based) and ``branch`` whether it sits under an ``all``/``race``.
    ``timer`` names what a parked step's timer waits for (``sleep``, ...), when it has one.
    """

    slot: str
    step: str
    operation: str
    status: str
    attempts: int | None = None
    due_at: float | None = None
    detail: str = ""
    error: dict[str, Any] | None = None
    committed_at: float | None = None
    timer: str | None = None
    heartbeat: dict[str, Any] | None = None  # the newest stored: attempt, at, details
    child_id: str | None = None  # the child workflow a child step started
    retried_at: float | None = None  # a retry of the run last ran it (or its parent) again

    @property
    def index(self) -> int:
        return keys.counter_value(self.slot.split(".", 1)[0])

    @property
    def branch(self) -> bool:
        return "." in self.slot

    @property
    def committed(self) -> bool:
        """The step's outcome is stored (it succeeded or failed for good)."""
        return self.status in ("ok", "failed")

    def as_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "step": self.step,
            "operation": self.operation,
            "status": self.status,
            "attempts": self.attempts,
            "due_at": self.due_at,
            "committed_at": self.committed_at,
            "detail": self.detail or None,
            "error": self.error,
            **({"heartbeat": jsonable(self.heartbeat)} if self.heartbeat is not None else {}),
            **({"retried_at": self.retried_at} if self.retried_at is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class WorkflowHistory:
    """A workflow's partition, read once and decoded: status, timeline, failed attempts.

    ``failed_attempts`` rows are ``{step, slot, activity, attempt, error_type, message,
    failed_at, retry_at}``; ``buffered_signals`` counts the signals not yet received, by name.
    """

    workflow_id: str
    status: str
    steps: tuple[TimelineStep, ...]
    failed_attempts: tuple[dict[str, Any], ...]
    buffered_signals: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class WorkflowInspection:
    """``inspect_workflow``'s answer: the description, the owner and the history together."""

    description: WorkflowDescription
    owner: Owner | None
    history: WorkflowHistory


def read_history(storage: Storage, workflow_id: str) -> WorkflowHistory | None:
    """The decoded history of ``workflow_id`` (one range read), None when it does not exist."""
    history = load_history(storage, workflow_id)
    if history is None:
        return None
    return WorkflowHistory(
        workflow_id=workflow_id,
        status=history.state.status,
        steps=tuple(timeline(history)),
        failed_attempts=tuple(failed_attempts(history)),
        buffered_signals={name: len(queue) for name, queue in history.signals.items() if queue},
    )


def read_owner(storage: Storage, workflow_id: str) -> Owner | None:
    """The workflow-lease epoch and holder of ``workflow_id`` (one read of its owner
    records; a run with a head carries its epoch there); None on a store (or run) without
    per-workflow ownership records."""
    found = dict(storage.scan(keys.workflow_partition(workflow_id), "owner#"))
    holder, epoch, head = (
        found.get(k) for k in (keys.OWNER_HOLDER, keys.OWNER_EPOCH, keys.OWNER_HEAD)
    )
    if holder is None and epoch is None:
        return None
    number = Head.from_bytes(head).epoch if head else int.from_bytes(epoch or b"", "big")
    record = holder_record(holder, head)  # an item of its own, or (layout 3) in the head
    return Owner(number, None if record is None else _holder(record))


def _holder(record: dict[str, Any]) -> Holder:
    claimed = record.get("claimed_at")
    return Holder(
        engine_id=str(record.get("engine_id")),
        epoch=int(record.get("epoch") or 0),
        expires_at=float(record.get("expires_at") or 0.0),
        claimed_at=None if claimed is None else float(claimed),
    )


def inspect_workflow(engine: Engine, workflow_id: str) -> WorkflowInspection:
    """Everything ``weft show`` prints about one run. Raises ``WorkflowNotFoundError``."""
    description = engine.describe(workflow_id)
    storage = engine.runtime.storage
    history = read_history(storage, workflow_id)
    if history is None:
        raise WorkflowNotFoundError(workflow_id)
    return WorkflowInspection(description, read_owner(storage, workflow_id), history)


def stored_ownership_mode(storage: Storage) -> Mode:
    """The ownership mode the store was set up with (its marker), or ``none`` without one."""
    marker = storage.get(keys.meta_key(keys.OWNERSHIP_MODE))
    if marker is None:
        return "none"
    mode = decode(marker).get("mode")
    if mode == "lease":
        return "lease"
    if marker_mode(mode) == "workflow-lease":  # either layout (ADR 0037)
        return "workflow-lease"
    return "none"


def read_only_engine(
    storage: Storage,
    engine_id: str,
    workflows: Mapping[str, WorkflowDefinition] | None = None,
) -> Engine:
    """An engine that only reads a store of any mode: no marker check, no claim, no recovery,
    no background work, and any write it tries fails with ``ConfigurationError``.

    ``workflows`` are needed only to answer queries, which replay a run's code in memory.
    """
    from weft_serverless.engine.engine import Engine
    from weft_serverless.engine.ownership import ReadOnly
    from weft_serverless.engine.runtime import assemble

    found = read_marker(storage)
    layout = ShardLayout() if found is None else found[0]
    return Engine(
        assemble(
            storage, dict(workflows or {}), ownership=ReadOnly, engine_id=engine_id, layout=layout
        )
    )


# -- the timeline ---------------------------------------------------------------------------


def timeline(history: History) -> list[TimelineStep]:
    """Every committed step, then what is parked, in slot order (branches under parents).

    Per step slot it joins the op record (signature, outcome, attempt number) with what is
    still pending there (a timer, a retry, an async activity, a child). Times are the ones the
    engine stores: when a step committed, and when a timer or retry falls due.
    """
    steps: dict[str, TimelineStep] = {}
    for slot, record in history.ops.items():
        steps[slot] = _committed(slot, record, history, keys.describe_slot(slot))
    for raw_slot, pending in history.pending.items():
        slot, _, attempt = raw_slot.partition("@")
        if slot in steps:
            continue
        # parked steps with a record keep their signature
        operation = "-" if pending.signature is None else str(pending.signature)
        due = pending.due
        step = TimelineStep(slot, keys.describe_slot(slot), operation, "waiting", due_at=due)
        if attempt:
            step.operation, step.attempts = _activity_signature(history, slot), int(attempt)
            step.detail = "async activity: waiting for complete/fail"
        elif pending.child_id is not None:
            step.operation, step.detail = "child", f"waiting for child {pending.child_id}"
            step.child_id = str(pending.child_id)
        elif pending.timer:
            step.timer = timer_kind(str(pending.timer[1]).rsplit("#", 1)[-1])
            step.detail = step.timer
        steps[slot] = step
    for slot, operation, status, failed, due, detail in retry_history.unfinished(history):
        if slot not in steps:
            label = keys.describe_slot(slot)
            steps[slot] = TimelineStep(slot, label, operation, status, failed, due, detail)
    for slot, step in steps.items():
        step.retried_at = retry_history.retried_at(history, slot)
    _add_heartbeats(steps, history)
    for step in steps.values():
        if step.status in ("waiting", "retrying", "running"):
            _settle(step, history)
    _add_parked_parents(steps, history)
    return [steps[slot] for slot in sorted(steps)]


def _add_heartbeats(steps: dict[str, TimelineStep], history: History) -> None:
    """The newest stored heartbeat of each unfinished step; a step with no other record is
    an attempt running now (or cut by a crash), shown as ``running``."""
    for slot, record in history.heartbeats.items():
        if slot in history.ops:
            continue
        beat = {"attempt": record.get("n"), "at": record.get("at"), "details": None}
        try:
            beat["details"] = decode(record["d"])
        except (KeyError, WeftError):
            beat["details"] = "(unreadable)"
        step = steps.get(slot)
        if step is None:
            step = TimelineStep(
                slot, keys.describe_slot(slot), "run", "running", attempts=beat["attempt"]
            )
            steps[slot] = step
        step.heartbeat = beat
        note = f"heartbeat of attempt {beat['attempt']}: {beat['details']!r}"
        step.detail = f"{step.detail}; {note}" if step.detail else note


def _activity_signature(history: History, slot: str) -> str:
    """``run:<activity>`` of a step parked on an async attempt, when a record names it."""
    for record in history.attempts.get(slot, [])[::-1]:
        if record.signature:
            return str(record.signature)
    return "run"


def _settle(step: TimelineStep, history: History) -> None:
    """A parked record that no longer waits: its race or all already ended, or the run did."""
    parts = step.slot.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        parent = history.ops.get(".".join(parts[:depth]))
        if parent is None:
            continue
        if parent.signature.startswith("race("):
            step.status, step.detail = "lost", f"branch {int(parent.index or 0) + 1} won"
        else:
            step.status, step.detail = "abandoned", "its all() failed first"
        step.due_at = None
        return
    status = history.state.status
    if status not in ("running", "suspended", "pending"):
        step.status = "cancelled" if status in ("cancelled", "timed-out") else "abandoned"
        step.detail = f"the run was {status} while it waited"
        step.due_at = None


def _add_parked_parents(steps: dict[str, TimelineStep], history: History) -> None:
    """Rows for the step a running workflow is parked at, when nothing else shows it."""
    for slot in list(steps):
        top = slot.split(".", 1)[0]
        if top not in steps:
            steps[top] = TimelineStep(top, keys.describe_slot(top), "all/race", "waiting")
            steps[top].detail = "parked: branches below"
            _settle(steps[top], history)
    if history.state.status not in ("running", "suspended"):
        return
    tops = [keys.counter_value(slot) for slot in steps if "." not in slot]
    done = [keys.counter_value(slot) for slot in history.ops if "." not in slot]
    parked_step = max(done) + 1 if done else history.state.first_step
    parked = keys.step_slot(parked_step)
    if not tops or max(tops) < parked_step:
        step = TimelineStep(parked, keys.describe_slot(parked), "-", "waiting")
        started = sorted(key for key in history.started if key.split("#", 1)[0] == parked)
        if started:
            attempt = keys.counter_value(started[-1].split("#", 1)[1])
            step.status, step.attempts = "unknown", attempt
            step.detail = f"attempt {attempt} started; its outcome is not recorded (a crash?)"
        else:
            # Nothing is stored for this step yet: what it is lives only in the code.
            step.detail = (
                "nothing recorded yet: a step not started (e.g. an activity not run yet) or "
                "a wait with no timeout (signal or condition)"
            )
        steps[parked] = step


def _committed(slot: str, record: OpRecord, history: History, label: str) -> TimelineStep:
    signature = record.signature or "?"
    failed_attempts = history.attempts.get(slot, [])
    failed_before = failed_attempts[-1].number if failed_attempts else 0
    attempts: int | None = record.attempt
    if attempts is None and signature.startswith("run:"):
        err = record.error or {}
        attempts = err.get("attempts") or failed_before + 1
    pending = history.pending.get(slot)
    due = None if pending is None else pending.due
    step = TimelineStep(slot, label, signature, "ok", attempts=attempts, due_at=due)
    step.committed_at = record.at
    if pending is not None and pending.child_id is not None:
        step.child_id = str(pending.child_id)
    if not record.ok:
        step.status = "failed"
        step.error = record.error
        err = step.error or {}
        step.detail = f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")
    elif signature.startswith("signal:"):
        step.detail = "received" if record.has_value else "timed out"
        if record.has_value:
            step.due_at = None  # the deadline did not matter
    elif signature.startswith("race("):
        step.detail = f"branch {int(record.index or 0) + 1} won"
    elif failed_attempts:
        step.detail = f"{max(failed_before, (attempts or 1) - 1)} failed attempt(s) before"
    step.detail = retry_history.with_retry_note(history, slot, step.detail)
    if step.due_at is not None and not step.detail:
        step.detail = "timer fired"
    return step
