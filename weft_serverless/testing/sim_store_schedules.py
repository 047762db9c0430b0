"""The schedules' invariants, checked after every write on ``StoreModel``.

A fire starts one run per fire time and counts it; nothing starts while a schedule is
paused but a trigger; only a resume lifts a pause; a fire under ``skip``, ``queue`` or
``cancel_running`` starts nothing beside a live run; a paused schedule names no fire and a
live one its next fire, with that fire's timer stored.
"""

from __future__ import annotations

from typing import Protocol

from weft_serverless.codec import decode
from weft_serverless.engine.persistence.records import SCHEDULE_FIELD, TERMINAL, WorkflowState
from weft_serverless.engine.schedules.record import ScheduleRecord
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key
from weft_serverless.testing.sim_records import JournalEntry

SCHEDULE_RESUMES = frozenset({"sched-resume"})
SCHEDULE_TRIGGERS = frozenset({"sched-trigger"})


class ScheduleModel(Protocol):
    """What the schedule checks read of the store model, and how they file a violation."""

    store: dict[Key, bytes]
    states: dict[str, WorkflowState]
    schedule_runs: dict[str, list[str]]
    moved: dict[str, set[Key]]

    def file(self, invariant: str, line: str) -> None: ...


def check_schedules(
    model: ScheduleModel,
    where: str,
    entry: JournalEntry,
    before: dict[Key, bytes | None],
    states_before: dict[str, WorkflowState | None],
) -> None:
    """A fire starts one run per fire time and counts it; nothing starts while paused
    but a trigger; a pause is lifted only by a resume; a schedule that does not allow
    overlap has one live run at most."""
    started: dict[str, list[str]] = {}
    for wf, old in states_before.items():
        state = model.states.get(wf)
        sid = None if state is None else state.extra.get(SCHEDULE_FIELD)
        if old is None and sid is not None and state is not None:
            started.setdefault(str(sid), []).append(wf)
    for sid, runs in started.items():
        previous = before.get(keys.schedule_key(sid))
        if previous is not None and _paused(previous) and entry.action not in SCHEDULE_TRIGGERS:
            model.file("schedule-pause-holds", f"{where}: paused {sid} started {runs}")
        model.schedule_runs.setdefault(sid, []).extend(runs)
    for key, old_bytes in before.items():
        if key.partition != keys.SCHEDULE_PARTITION or key not in model.store:
            continue
        record = ScheduleRecord.from_bytes(model.store[key])
        lifted = old_bytes is not None and _paused(old_bytes) and not record.paused
        if lifted and entry.action not in SCHEDULE_RESUMES:
            model.file("schedule-pause-holds", f"{where}: lifted the pause of {record.id}")
        _schedule_shape(model, where, record)
        runs = model.schedule_runs.get(record.id, [])
        if record.fired != len(runs) or len(set(runs)) != len(runs):
            model.file(
                "schedule-fires-once",
                f"{where}: {record.id} counts {record.fired} fires, started {runs}",
            )
        new = started.get(record.id, [])
        if new and record.spec.overlap != "allow":
            live = [wf for wf in set(runs) if _live(model.states.get(wf))]
            if len(live) > len(new):
                model.file(
                    "schedule-fires-once",
                    f"{where}: {record.id} ({record.spec.overlap}) started {new} with "
                    f"{sorted(set(live) - set(new))} live",
                )


def _schedule_shape(model: ScheduleModel, where: str, record: ScheduleRecord) -> None:
    """A paused schedule points at no fire; a live one (with no end) at its next fire,
    one of its spec's, whose timer is stored (or was moved on by a capped pass)."""
    spec = record.spec
    if record.paused:
        wrong = record.next is not None or record.timer is not None
    elif record.next is None:
        wrong = spec.end_at is None
    else:
        timer = record.timer_key()
        on_grid = spec.at_or_before(record.next) == record.next
        armed = timer is not None and (timer in model.store or model.moved.get(record.id))
        wrong = not on_grid or not armed
    if wrong:
        model.file(
            "schedules-stay-armed",
            f"{where}: {record.id} (paused {record.paused}) next {record.next}, "
            f"timer {record.timer}",
        )


def _paused(raw: bytes) -> bool:
    return bool(decode(raw).get("paused"))


def _live(state: WorkflowState | None) -> bool:
    return state is not None and state.status not in TERMINAL
