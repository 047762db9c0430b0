"""Timers: every kind in one table, and the helpers that arm, point at and drop them.

A timer is a record in a timer shard whose sort key is ``due#workflow#tag`` and whose value
names the workflow and the timer's ``kind``. The maintenance pass reads due timers, groups
them by workflow and fires each kind through its handler, in table order (ADR 0002: a timer
only wakes; a stale one finds nothing to do).

``KINDS`` is the one place a kind is declared: its stored name, its sort-key tag, how it is
armed and what firing it does. Adding a kind is one row plus its handler. Names and tags are
persisted (stored keys and values): never change an existing one.

Handlers act through ``TimerActions`` (implemented by the maintenance pass), so this module
stays below everything that arms timers (lifecycle, transitions, steps) and imports none of
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from weft_serverless.engine.persistence.records import History
from weft_serverless.engine.persistence.stored_records import (
    AttemptRecord,
    PendingRecord,
    TimerRecord,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Delete, Key, Op, Put
from weft_serverless.storage.keys.shards import ShardCounts

Scope = Literal["run", "step", "event"]
"""How a kind is armed, which decides its tag.

``run``: at most one per run and kind; the tag is the kind's name.
``step``: parks one step; the tag is a letter followed by the step's slot (and attempt).
``event``: marks one event (a signal, a completion); the tag is a letter and a unique suffix.
"""

# What a handler may end a firing with (anything else: go on with the next kinds).
COLLECT = "collect"
ERROR = "error"
TIMED_OUT = "timed-out"


class TimerActions(Protocol):
    """The engine operations timer handlers need; the maintenance pass provides them."""

    def close_children(self, workflow_id: str) -> None: ...

    def purge_when_due(self, workflow_id: str) -> str: ...

    def time_out(self, workflow_id: str) -> bool: ...

    def activate_delayed(self, workflow_id: str) -> bool: ...

    def fire_schedule(self, schedule_id: str) -> None: ...
    def admit_queued(self, gate: str) -> int: ...

    def run_teardown(self, workflow_id: str) -> str: ...

    def continue_bulk(self, operation_id: str) -> None: ...


Handler = Callable[[TimerActions, str], str | None]
"""Fires one due kind for a workflow: returns how the firing ends, or None to go on."""


@dataclass(frozen=True, slots=True)
class TimerKind:
    """One row of ``KINDS``.

    ``tag``: the whole tag (scope ``run``) or its first letter (``step``, ``event``); None
    for a kind that re-arms a timer under the key it already had. ``label``: what a parked
    step waits for, for people (the renderer). ``wakes``: whether firing ends in a drive of
    the run. ``fire``: the handler run before that drive (None: nothing but the drive).
    """

    name: str
    scope: Scope
    tag: str | None
    label: str
    wakes: bool = True
    fire: Handler | None = None


def _close_children(actions: TimerActions, workflow_id: str) -> str | None:
    actions.close_children(workflow_id)
    return None


def _purge(actions: TimerActions, workflow_id: str) -> str | None:
    outcome = actions.purge_when_due(workflow_id)
    if outcome == "raced":
        return ERROR
    if outcome in ("purged", "kept"):
        return COLLECT
    # Retried since it ended (its next end arms a new one), or its teardown is pending
    # (the teardown's end arms a new one): this one is done.
    return None


def _time_out(actions: TimerActions, workflow_id: str) -> str | None:
    return TIMED_OUT if actions.time_out(workflow_id) else None


def _activate_delayed(actions: TimerActions, workflow_id: str) -> str | None:
    actions.activate_delayed(workflow_id)
    return None


def _fire_schedule(actions: TimerActions, schedule_id: str) -> str | None:
    actions.fire_schedule(schedule_id)
    return None


def _admit_queued(actions: TimerActions, gate: str) -> str | None:
    actions.admit_queued(gate)
    return COLLECT  # names a concurrency key, not a run: nothing to drive


def _run_teardown(actions: TimerActions, workflow_id: str) -> str | None:
    # Kept for a later pass while another engine holds it, or this one lost it: only the
    # write completing the teardown (or re-arming it for a backoff) ends its timer.
    return ERROR if actions.run_teardown(workflow_id) in ("retain", "deposed") else COLLECT


def _continue_bulk(actions: TimerActions, operation_id: str) -> str | None:
    # Every page the operation saves moves its timer (or, once completed, deletes it), so
    # this firing's key is always done with: what is left is the re-armed one's.
    actions.continue_bulk(operation_id)
    return COLLECT


# Firing order is table order: close children, purge, time out, activate, then one drive.
CLOSE_CHILDREN = TimerKind(
    "close-children", "run", "close-children", "closing children", False, _close_children
)
RETENTION = TimerKind("retention", "run", "retention", "retention window", False, _purge)
DEADLINE = TimerKind("deadline", "run", "deadline", "execution timeout", False, _time_out)
DELAYED_START = TimerKind(
    "delayed-start", "run", "delayed-start", "delayed start", True, _activate_delayed
)
WAKE = TimerKind("wake", "run", "wake", "wake-up")
SLEEP = TimerKind("sleep", "step", "s", "sleep")
SIGNAL_TIMEOUT = TimerKind("timeout", "step", "w", "signal wait (timeout)")
CONDITION_TIMEOUT = TimerKind("wait-condition", "step", "u", "condition (timeout)")
RETRY = TimerKind("retry", "step", "r", "activity retry")
BUDGET = TimerKind("budget", "step", "b", "next invocation")
CHILD = TimerKind("child", "event", "c", "child finished")
SIGNAL = TimerKind("signal", "event", "g", "signal")
ASYNC_ACTIVITY = TimerKind("async-activity", "event", "a", "async activity completed")
RESUME = TimerKind("resume", "step", None, "resumed")
# A schedule's next fire (and a queued fire's chance when a run of it ends): armed under the
# schedule's id, never a run's; it wakes no run itself, the runs it starts are driven.
SCHEDULE = TimerKind("schedule", "run", "schedule", "schedule fire", False, _fire_schedule)
CONCURRENCY_ADMIT = TimerKind(
    "concurrency-admit", "event", "q", "concurrency slot", False, _admit_queued
)
# A terminal run's finalizers (ADR 0027): armed by the terminal batch, re-armed for a backoff.
TEARDOWN = TimerKind("teardown", "run", "teardown", "finalizers", False, _run_teardown)
# A bulk operation that made no progress for a while (its process died, or it stopped at a
# page boundary when low on time): armed under the operation's id, never a run's (ADR 0031).
BULK = TimerKind("bulk", "run", "bulk", "bulk operation", False, _continue_bulk)

KINDS: tuple[TimerKind, ...] = (
    CLOSE_CHILDREN,
    RETENTION,
    DEADLINE,
    DELAYED_START,
    WAKE,
    SLEEP,
    SIGNAL_TIMEOUT,
    CONDITION_TIMEOUT,
    RETRY,
    BUDGET,
    CHILD,
    SIGNAL,
    ASYNC_ACTIVITY,
    RESUME,
    SCHEDULE,
    CONCURRENCY_ADMIT,
    TEARDOWN,
    BULK,
)

BY_NAME: Mapping[str, TimerKind] = {kind.name: kind for kind in KINDS}
STEP_TAGS: Mapping[str, TimerKind] = {
    kind.tag: kind for kind in KINDS if kind.scope != "run" and kind.tag is not None
}
"""Step and event kinds by tag letter: decode a stored tag with ``kind_of_tag``."""


def kind_of_tag(tag: str) -> TimerKind | None:
    """The step or event kind a stored tag was armed with (None: a run timer or unknown)."""
    return STEP_TAGS.get(tag[:1])


def firing_order(names: set[str]) -> list[TimerKind | str]:
    """The kinds due for one workflow in table order; unknown names (kept as strings) last."""
    known: list[TimerKind | str] = [kind for kind in KINDS if kind.name in names]
    return known + sorted(names - BY_NAME.keys())


def timer_key(
    shards: ShardCounts, kind: TimerKind, workflow_id: str, due: float, suffix: str = ""
) -> Key:
    """Where a timer of ``kind`` due at ``due`` is stored (``suffix`` follows the tag)."""
    assert kind.tag is not None, f"{kind.name} timers keep the key they were armed with"
    return keys.timer_key(shards, due, workflow_id, kind.tag + suffix)


def timer_value(workflow_id: str, kind: TimerKind | str, *, retained: int = 0) -> bytes:
    """A timer's value; ``retained`` counts the passes that had to leave it (its backoff)."""
    name = kind if isinstance(kind, str) else kind.name
    return TimerRecord(workflow_id, name, retained).to_bytes()


def arm(
    shards: ShardCounts, kind: TimerKind, workflow_id: str, due: float, suffix: str = ""
) -> Put:
    """The write that arms a timer of ``kind`` for ``workflow_id``."""
    return Put(timer_key(shards, kind, workflow_id, due, suffix), timer_value(workflow_id, kind))


def timer_ref(key: Key) -> list[str]:
    """How a record points at its timer (stored as it is)."""
    return [key.partition, key.sort]


def stale_timer_deletes(history: History, slot: str, now: float) -> list[Op]:
    """Deletes for timers of ``slot`` (and its branches) that have not fallen due yet.

    Timers already due are left to the maintenance pass that fires them, which deletes
    them after driving; deleting here too would only add write cost. The records are found
    through the tables' scope index (``SlotTable.under``): a commit never walks history.
    """
    ops: list[Op] = []
    if not history.pending and not history.attempts:
        return ops  # most runs between parks: nothing can be stale
    for pend_slot in history.pending.under(slot):
        ops.extend(_future_timer(history.pending[pend_slot], now))
    for att_slot in history.attempts.under(slot):
        records = history.attempts[att_slot]
        if records:
            ops.extend(_future_timer(records[-1], now))
    return ops


def _future_timer(record: PendingRecord | AttemptRecord, now: float) -> list[Op]:
    ref, due = record.timer, record.due
    if not ref or due is None or keys.is_due(now, due):
        return []
    return [Delete(Key(ref[0], ref[1]))]
