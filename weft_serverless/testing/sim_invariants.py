"""Invariants the simulator checks after a scenario (DESIGN.md, "Invariants every change keeps").

Each checker reads the store directly (keys from ``storage/keys.py``) or the world's records
(the write journal of every engine, activity executions, what the workload sent) and returns
the violations it found, one line each. The journal checks cover every write of the run, so
safety is checked continuously, not only at the end; liveness is judged at quiescence, after
faults stopped and time ran on. ``INVARIANTS`` is the table; a new check is one entry.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from weft_serverless.codec import decode
from weft_serverless.engine.engine import Engine
from weft_serverless.engine.persistence.records import (
    PENDING,
    RUNNING,
    SUSPENDED,
    TERMINAL,
    WorkflowState,
)
from weft_serverless.errors import WeftError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Put
from weft_serverless.testing import sim_checks as checks
from weft_serverless.testing.sim_actions import FLOOD_PREFIX
from weft_serverless.testing.sim_checks import from_model
from weft_serverless.testing.sim_quiescence import LATE_PASSES, STEP
from weft_serverless.testing.sim_steps import StepLedger, workflow_of
from weft_serverless.testing.sim_workload import COMMANDS, Where
from weft_serverless.testing.sim_world import RENEW, World

Checker = Callable[[World], list[str]]
YOUNG = 60.0  # seconds before the end within which a run may have started and not finished


def unexpected_errors(world: World) -> list[str]:
    """Nothing but a ``WeftError`` (or an injected fault) escapes an engine call."""
    return list(world.problems)


def steps_commit_once(world: World) -> list[str]:
    """No step is committed twice (a retry forgets the failed one first): by an ``op#`` put
    or, on a run with a head, by a head carrying a new inline step (sim_steps.py)."""
    return _ledger(world).twice


def no_deposed_writes(world: World) -> list[str]:
    """Under workflow-lease every step and owner record lands fenced on the current epoch, by
    its holder; the unfenced write-out of a head's inline step lands only as the committed
    step's own bytes, or as a record no reader counts. Under lease every engine write lands
    fenced on the store-wide epoch, by its holder (``sim_store_model``)."""
    if world.ownership == "none":
        return []
    return _ledger(world).deposed + checks.model(world).problems.get("no-deposed-writes", [])


def _ledger(world: World) -> StepLedger:
    """The journal's steps, walked once for both step checks (fenced under workflow-lease)."""
    if world.steps is None:
        world.steps = StepLedger(fenced=world.ownership == "workflow-lease").walk(world.journal)
    return world.steps


def activities_run_once_more_than_faults(world: World) -> list[str]:
    """An attempt re-runs only after a fault hit the engine that ran it, or hit the engine
    of either run during its drive (a stalled engine's queued branch runs late; its commit
    is fenced out, so the next run is not a second one), or after the operator suspended,
    resumed or retried the run while that run's drive was in flight (a drive that starts
    after such a move must see it: a queued drive trusting an old claim is a defect).

    Not promised in mode none with several engines (any engine may drive any run there).
    """
    if world.ownership == "none":
        return []
    interventions = {wf: list(ticks) for wf, ticks in world.interventions.items()}
    for wf, tick in _retries(world):
        interventions.setdefault(wf, []).append(tick)
    problems = []
    for (wf, step, tag, attempt), runs in sorted(world.executions.items()):
        for before, again in itertools.pairwise(runs):
            # A fault on the engine of the first run since it ran, or on the engine of either
            # run during its drive (a stalled drive's attempt runs late: it is fenced out).
            hit = world.slots[before.slot].faults > before.slot_faults
            hit = hit or before.slot_faults > before.drive_faults
            hit = hit or again.slot_faults > again.drive_faults
            moved = any(
                before.drive_start < tick < again.tick for tick in interventions.get(wf, [])
            )
            if not hit and not moved:
                problems.append(
                    f"activity {tag} of {wf} step {step} attempt {attempt} ran again on "
                    f"e{again.slot} with no fault on e{before.slot} since its first run"
                )
    return problems


def _retries(world: World) -> Iterator[tuple[str, int]]:
    """Every retry of a failed run (by the operator or a bulk operation), when it landed."""
    status: dict[str, str] = {}
    for entry in world.journal:
        if not entry.committed:
            continue
        for op in entry.ops:
            wf = workflow_of(op.key)
            if wf is None or op.key.sort != keys.STATE or not isinstance(op, Put):
                continue
            new = WorkflowState.from_bytes(op.value).status
            if status.get(wf) == "failed" and new == RUNNING:
                yield wf, entry.tick
            status[wf] = new


def _observer(world: World) -> Engine:
    """A fresh engine on the store, outside the fault plan, to read and replay."""
    return world.observer()


def _states(world: World) -> dict[str, WorkflowState]:
    found = {}
    for wf in world.known_runs:
        data = world.store.get(keys.state_key(wf))
        if data is not None:
            found[wf] = WorkflowState.from_bytes(data)
    return found


def signals_with_id_consumed_once(world: World) -> list[str]:
    """A completed run received each signal payload (ids dedupe, the rest are unique) once."""
    problems = []
    for wf, state in _states(world).items():
        if state.status == "completed" and state.result is not None:
            sigs = decode(state.result).get("sigs", [])
            for payload in sorted({s for s in sigs if sigs.count(s) > 1}):
                problems.append(f"{wf} received signal {payload!r} {sigs.count(payload)} times")
    return problems


def history_replays_to_result(world: World) -> list[str]:
    """A fresh engine replaying a completed run's history reaches the stored result."""
    problems = []
    observer = _observer(world)
    for wf, state in _states(world).items():
        if state.status != "completed" or state.result is None:
            continue
        try:
            replayed = observer.query(wf, "where")["result"]
        except WeftError as exc:
            problems.append(f"{wf}: replay failed: {type(exc).__name__}: {exc}")
            continue
        if replayed != decode(state.result):
            problems.append(f"{wf}: replay gives {replayed!r}, stored {decode(state.result)!r}")
    return problems


def every_run_has_a_way_forward(world: World) -> list[str]:
    """At quiescence every run is terminal, suspended, or parked on a wait nobody satisfied."""
    states = _states(world)
    world.live_children = {
        wf: s.status for wf, s in states.items() if s.status not in TERMINAL and ".c" in wf
    }
    observer = _observer(world)
    problems = []
    for wf, state in states.items():
        if state.status in TERMINAL or state.status == SUSPENDED or _flooded(wf):
            continue
        if state.created_at > world.now - YOUNG - world.backlog_rounds * STEP:
            # Started in the last minute (a schedule fires on), or in the rounds before it
            # that a flood's backlog may hold each of its timers back: still on its way.
            continue
        if state.status == PENDING and (state.extra.get("concurrency") or {}).get("queued"):
            continue  # waits for a slot: ``no-run-queued-behind-a-free-slot`` judges that
        if state.status == PENDING:
            problems.append(f"{wf} is still pending long after its start time")
            continue
        assert state.status == RUNNING
        program = decode(state.input)["prog"]
        try:
            where = observer.query(wf, "where")
        except WeftError as exc:
            problems.append(f"{wf} is running and cannot be replayed: {exc}")
            continue
        at = Where(where["step"], where["signals"], where["updates"])
        if at.step >= len(program):
            problems.append(f"{wf} is running past its last step with nothing to finish it")
            continue
        name, arg = program[at.step]
        if not COMMANDS[name].parked_ok(world, wf, at, arg):
            problems.append(f"{wf} is running, stuck at step {at.step} ({name}) with no way on")
    return problems + _stale_timers_and_claims(world, states)


def timers_fire_within_bounded_passes(world: World) -> list[str]:
    """At quiescence no timer stays due through ``LATE_PASSES`` rounds of passes, whatever
    else is due or retained (a run it wakes may rightly be suspended or finished: then the
    pass collects the timer)."""
    return [f"timer {sort} stayed due through {LATE_PASSES} rounds" for sort in world.late_timers]


def _flooded(wf: str) -> bool:
    """A flood's own runs wait for takeovers, a few per pass by design; the others must not."""
    return wf.startswith(FLOOD_PREFIX)


def _stale_timers_and_claims(world: World, states: dict[str, WorkflowState]) -> list[str]:
    problems = []
    for shard in range(keys.TIMER_SHARDS):
        bound = keys.timer_due_bound(world.now - 60.0 - world.backlog_rounds * STEP)
        for sort, _ in world.store.scan(keys.timer_partition(shard), lt=bound):
            wf = keys.dec(sort.split("#")[1])
            state = states.get(wf)
            if state is not None and state.status == RUNNING and not _flooded(wf):
                problems.append(f"timer {sort} of running {wf} is overdue and never fired")
    for wf, state in states.items():
        # Layout 3 keeps no index of claims: an expired holder in a head is taken over by
        # the next wake its run's timers bring, and the check above covers those timers.
        raw = world.store.get(keys.owner_holder_key(wf))
        if raw is None or state.status != RUNNING or _flooded(wf):
            continue
        holder = decode(raw)
        if float(holder["expires_at"]) + 2 * RENEW + 1.0 < world.now:
            problems.append(f"{wf} is claimed by {holder['engine_id']}, expired, never taken over")
    return problems


def children_follow_their_parent(world: World) -> list[str]:
    """At quiescence an awaited or request-cancel child of a finished parent is finished too.

    Under workflow-lease only: in mode none a cancel fences out no engine still driving the
    parent, which may start a child after it (mode none is for one engine per store).
    """
    if world.ownership == "none":
        return []
    states = _states(world)
    problems = []
    for wf, state in states.items():
        if state.parent is None or state.status in TERMINAL or state.status == SUSPENDED:
            continue
        parent_id = str(state.parent["id"])
        parent = states.get(parent_id)
        step = int(wf.rsplit(".c", 1)[1])
        if parent is None or parent.status not in TERMINAL:
            continue
        policy = decode(parent.input)["prog"][step][1][0]
        if policy in ("await", "request-cancel"):
            problems.append(f"{wf} ({policy}) is {state.status}; its parent is {parent.status}")
    return problems


PLANNED = ("SimFailure", "refused")


def failures_are_planned(world: World) -> list[str]:
    """A run fails only because the workload made an activity fail, a child failed, or a
    child of a rejecting type found its limit full (no other reason not to start one)."""
    states = _states(world)
    problems = []
    for wf, state in states.items():
        if state.status != "failed":
            continue
        error = state.error or {}
        message = str(error.get("message", ""))
        if error.get("type") == "ActivityFailedError" and any(p in message for p in PLANNED):
            continue
        if error.get("type") == "ChildWorkflowFailedError":
            if "not-started" in message:
                if "WorkflowConcurrencyLimitExceededError" in message:
                    continue  # a child of a rejecting type beyond its limit: planned
            else:
                child = next((c for c in states if c.startswith(wf + ".c") and c in message), None)
                child_state = states.get(child) if child else None
                if child_state is None or child_state.status in TERMINAL - {"completed"}:
                    continue
        problems.append(f"{wf} failed for no planned reason: {error.get('type')}: {message}")
    return problems


INVARIANTS: dict[str, Checker] = {
    "unexpected-errors": unexpected_errors,
    "step-commits-once": steps_commit_once,
    "no-deposed-writes": no_deposed_writes,
    "terminal-holds-no-claim": from_model("terminal-holds-no-claim"),
    "activity-runs-once-more-than-faults": activities_run_once_more_than_faults,
    "signal-id-consumed-once": signals_with_id_consumed_once,
    "history-replays": history_replays_to_result,
    "liveness": every_run_has_a_way_forward,
    "timers-fire-in-bounded-passes": timers_fire_within_bounded_passes,
    "children-follow-parent": children_follow_their_parent,
    "failures-are-planned": failures_are_planned,
    "terminal-leaves-nothing": from_model("terminal-leaves-nothing"),
    "finished-runs-keep-no-timers": checks.finished_runs_keep_no_timers,
    "finished-runs-are-frozen": from_model("finished-runs-are-frozen"),
    "finished-runs-stay-finished": from_model("finished-runs-stay-finished"),
    "runs-hold-their-slot": from_model("runs-hold-their-slot"),
    "no-run-queued-behind-a-free-slot": checks.no_run_queued_behind_a_free_slot,
    "schedule-writes-are-conditional": from_model("schedule-writes-are-conditional"),
    "schedule-fires-once": from_model("schedule-fires-once"),
    "schedule-pause-holds": from_model("schedule-pause-holds"),
    "schedules-stay-armed": checks.schedules_stay_armed,
    "finalizers-run": checks.finalizers_ran,
    "results-match-programs": checks.results_match_programs,
    "heartbeats-carry-over": checks.heartbeats_carry_over,
    "updates-acknowledged-are-applied": checks.acknowledged_updates_are_applied,
    "bulk-acts-once": from_model("bulk-acts-once"),
    "bulk-writes-are-conditional": from_model("bulk-writes-are-conditional"),
    "events-carry-their-wake-up": from_model("events-carry-their-wake-up"),
    "freed-slots-wake-their-queue": from_model("freed-slots-wake-their-queue"),
    "signals-leave-consumed": from_model("signals-leave-consumed"),
    "updates-applied-once": from_model("updates-applied-once"),
    "continue-carries-nothing-over": from_model("continue-carries-nothing-over"),
    "bulk-operations-finish-exactly": checks.bulk_operations_finish_exactly,
    "listings-match-runs": checks.listings_match_runs,
    "maps-respect-their-bound": checks.maps_respect_their_bound,
    "timers-never-fire-early": from_model("timers-never-fire-early"),
    "hinted-timers-fire-at-once": checks.at_hint_calls("hinted-timers-fire-at-once"),
    "early-hints-are-sent-again": checks.at_hint_calls("early-hints-are-sent-again"),
}
"""Every invariant the simulator checks: name -> checker. A new invariant is one entry."""


def check(world: World) -> list[str]:
    """Every violation found, each prefixed by the invariant's name. A check that cannot
    read what the engines left (a replay or a read raising anything) is a violation too."""
    found: list[str] = []
    for name, checker in INVARIANTS.items():
        try:
            lines = checker(world)
        except Exception as exc:
            lines = [f"checking raised {type(exc).__name__}: {exc}"]
        found.extend(f"[{name}] {line}" for line in lines)
    return found


__all__ = ["INVARIANTS", "check"]
