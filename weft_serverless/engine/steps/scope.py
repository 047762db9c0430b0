"""What every step handler shares within one workflow drive: the loaded history and the
commits that finish or park a step.

Handlers take a ``StepScope`` rather than the runner, so they do not import the module that
imports them; the runner fills in ``advance`` and ``replay`` (composite steps call back into
them for their branches).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from weft_serverless.commands import Command
from weft_serverless.engine.persistence import history_limit, timers, wakeups
from weft_serverless.engine.persistence.outcomes import Done, Outcome
from weft_serverless.engine.persistence.records import History
from weft_serverless.engine.persistence.retry_history import RETRIES_FIELD
from weft_serverless.engine.persistence.stored_records import AttemptRecord, OpRecord, PendingRecord
from weft_serverless.engine.runs.commit import (
    commit,
    commit_cleanup,
    commit_record,
    park_on_head,
)
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.errors import NondeterminismError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Key, Op, Put
from weft_serverless.workflow import WorkflowDefinition

Parkable = TypeVar("Parkable", PendingRecord, AttemptRecord)

_deferrals = itertools.count()


class StepScope(ABC):
    """One workflow drive's state and the writes its steps make."""

    def __init__(
        self,
        rt: Runtime,
        workflow_id: str,
        definition: WorkflowDefinition,
        history: History,
        enqueue: Callable[[str], None],
    ) -> None:
        self.rt = rt
        self.workflow_id = workflow_id
        self.definition = definition
        self.history = history
        self.enqueue = enqueue
        self.awaiting: set[str] = set()
        self.signature = ""  # of the command being advanced: parked records carry it
        self.slot = ""  # of the step being advanced: log lines name it (telemetry.RunFields)
        self.first = history.state.first_step  # step i of this run is at slot first + i
        self.step = 0  # top-level steps the run's code has taken so far in this drive
        self.loaded = history.top_level_steps()  # top-level steps recorded when loaded

    def next_slot(self) -> str:
        """The slot the run's next step-taking command takes."""
        return keys.step_slot(self.first + self.step)

    @abstractmethod
    def advance(self, cmd: Command[Any], slot: str) -> Done | None:
        """Carry the command on as far as it can go now (``None``: parked)."""

    @abstractmethod
    def replay(self, cmd: Command[Any], slot: str, record: OpRecord) -> Outcome:
        """The outcome a recorded step gives back, without re-running anything."""

    def begin(self, cmd: Command[Any], slot: str) -> None:
        """What comes before carrying out any command, whoever carries it (``advance``, or a
        branch running beside others): the history bound, the parked record's operation, and
        the signature and slot the step's writes and log lines name."""
        history_limit.check(self.history, self.definition)
        self.check_parked_signature(cmd, slot)
        self.signature, self.slot = cmd.signature(), slot

    def check_signature(self, cmd: Command[Any], slot: str, record: OpRecord) -> None:
        stored, current = record.signature, cmd.signature()
        if stored != current:
            raise NondeterminismError(keys.describe_slot(slot), stored, current)

    def check_parked_signature(self, cmd: Command[Any], slot: str) -> None:
        """A step parked on a pending record must be resumed by the same operation."""
        attempts = self.history.attempts.get(slot)
        for record in (self.history.pending.get(slot), attempts[-1] if attempts else None):
            stored = None if record is None else record.signature
            if stored and stored != cmd.signature():
                raise NondeterminismError(keys.describe_slot(slot), stored, cmd.signature())

    def commit_done(self, cmd: Command[Any], slot: str, done: Done) -> None:
        """Write a finished step's op record together with its effects."""
        history_limit.check(self.history, self.definition)
        # retries: its event id stays apart from the records a retry set aside
        retries = self.history.state.extra.get(RETRIES_FIELD)
        record = done.record.committed(cmd.signature(), self.rt.now(), retries, None)
        expected = self.history.void_ops.get(slot)  # a tombstone or a void item, or nothing
        record, ops, left = commit_record(
            self.rt,
            self.workflow_id,
            slot,
            record,
            expected,
            conditions=done.conditions,
            ops=done.ops,
            cleanup=done.cleanup,
        )
        self.history.void_ops.pop(slot, None)
        self.rt.metrics.steps_committed += 1
        self.history.ops[slot] = record
        self.history.note(ops)
        for callback in done.after_commit:
            callback()
        if left:
            commit_cleanup(self.rt, self.workflow_id, left)

    def park(
        self,
        record_key: Key,
        record: Parkable,
        due: float,
        kind: timers.TimerKind,
        suffix: str,
        also: Sequence[Op] = (),
    ) -> Parkable:
        """Commit a pending fact together with the timer that will wake the workflow (and
        ``also``, in the same batch)."""
        timer = timers.timer_key(self.rt.shards, kind, self.workflow_id, due, suffix)
        stored = record.parked(self.signature, due, timers.timer_ref(timer))
        top = "." not in self.slot and record_key.sort == keys.PENDING_PREFIX + self.slot
        if top and not also and self.rt.fence.parks_on_head(self.workflow_id):
            arm = Put(timer, timers.timer_value(self.workflow_id, kind.name))
            park_on_head(
                self.rt,
                self.workflow_id,
                self.slot,
                stored.to_bytes(),
                arm,
                wakeups.disarm(self.history),
            )
            wakeups.disarmed(self.history)
            return stored
        self.commit_parking(
            [Condition(record_key, None)],
            [
                Put(record_key, stored.to_bytes()),
                Put(timer, timers.timer_value(self.workflow_id, kind.name)),
                *also,
            ],
            self.slot,
        )
        return stored

    def commit_parking(self, conditions: list[Condition], ops: list[Op], slot: str = "") -> None:
        """Commit a batch that parks the step at ``slot`` (none: the run); it takes the run's
        wake-up with it, unless it parks a branch: the drive goes on with the step's other
        branches (and may delete this branch's timer: a race's losing sleep), and drops the
        wake-up itself once the run parks (``drive.run_loop``)."""
        if "." in slot:
            commit(self.rt, self.workflow_id, conditions, ops)
            return
        commit(self.rt, self.workflow_id, conditions, ops + wakeups.disarm(self.history))
        wakeups.disarmed(self.history)

    def finish(self, slot: str, outcome: Outcome, record: OpRecord, **extra: Any) -> Done:
        done = Done(outcome, record, **extra)
        if self.history.pending or self.history.attempts:  # else nothing can be stale
            done.cleanup.extend(timers.stale_timer_deletes(self.history, slot, self.rt.now()))
        return done

    def log_warning(self, message: str) -> None:
        logger.warning("workflow %s: %s", self.workflow_id, message)

    def yield_to_next_invocation(self, slot: str, attempt: int) -> None:
        """Too little time left to start this step: park behind a timer that is due now."""
        now = self.rt.now()
        deferral = keys.counter(next(_deferrals), 8)
        suffix = f"{slot}#{attempt}#{keys.ms(now)}.{deferral}"  # never reuses a key
        self.commit_parking(
            [], [timers.arm(self.rt.shards, timers.BUDGET, self.workflow_id, now, suffix)], slot
        )
        self.rt.metrics.incr("steps_deferred_for_budget")
