"""Invariants of the engine's wider features, judged at quiescence (after faults stopped and
time ran on), and the table rows that read ``StoreModel``'s per-write findings.

Each checker is a function from the world to its violations, one line each, entered in
``sim_invariants.INVARIANTS``.
"""

from __future__ import annotations

import itertools
from typing import Any

from weft_serverless.codec import decode
from weft_serverless.engine.engine import Engine
from weft_serverless.engine.persistence.records import PENDING, TERMINAL, WorkflowState
from weft_serverless.engine.schedules.record import ScheduleRecord
from weft_serverless.errors import WeftError
from weft_serverless.storage import keys
from weft_serverless.testing.sim_commands import expected, matches
from weft_serverless.testing.sim_operations import LIST_FILTERS, compare_listing
from weft_serverless.testing.sim_quiescence import STEP as QUIESCE_STEP
from weft_serverless.testing.sim_store_model import BULK_SIGNAL, StoreModel
from weft_serverless.testing.sim_workload import LIMITS, TYPES
from weft_serverless.testing.sim_world import World

CANCEL_ENDS = frozenset({"cancelled", "timed-out"})
ENDED_A_WHILE = 60.0  # seconds after its end by which a finished run's timers are gone
SCHEDULE_LATE = 30.0  # seconds a live schedule's next fire may be overdue at quiescence


def model(world: World) -> StoreModel:
    """The journal replayed onto a model of the store (once per world)."""
    if world.model is None:
        rejecting = frozenset(kind for kind, spec in world.flows.items() if _rejects(spec))
        world.model = StoreModel(world.ownership, rejecting).walk(world.journal)
    return world.model


def _rejects(definition: Any) -> bool:
    return definition.concurrency is not None and definition.concurrency.on_limit == "reject"


def at_hint_calls(invariant: str) -> Any:
    """The table row of an invariant the ``hint`` action judges at its call (``sim_hints``)."""

    def check(world: World) -> list[str]:
        return list(world.hint_problems.get(invariant, []))

    check.__name__ = invariant.replace("-", "_")
    check.__doc__ = f"``{invariant}``, judged at each delivered hint (``sim_hints``)."
    return check


def from_model(invariant: str) -> Any:
    """The table row of an invariant ``StoreModel`` checks after every write."""

    def check(world: World) -> list[str]:
        return list(model(world).problems.get(invariant, []))

    check.__name__ = invariant.replace("-", "_")
    check.__doc__ = f"``{invariant}``, checked after every write (``sim_store_model``)."
    return check


def _states(world: World) -> dict[str, WorkflowState]:
    found = {}
    for wf in world.known_runs:
        data = world.store.get(keys.state_key(wf))
        if data is not None:
            found[wf] = WorkflowState.from_bytes(data)
    return found


def finished_runs_keep_no_timers(world: World) -> list[str]:
    """At quiescence no timer names a run that ended more than a minute ago, but its
    retention's (one ended from outside may leave a step's timer: it fires within the
    step's own wait, finds the run finished, and goes), nor past the rounds the passes need
    to read past a flood's backlog, which hides a finished run's timer as it hides any other."""
    states = _states(world)
    ended = world.now - ENDED_A_WHILE - world.backlog_rounds * QUIESCE_STEP
    problems = []
    for shard in range(keys.TIMER_SHARDS):
        for sort, value in world.store.scan(keys.timer_partition(shard)):
            timer = decode(value)
            state = states.get(str(timer["wf"]))
            if state is None or state.status not in TERMINAL or timer["kind"] == "retention":
                continue
            if state.updated_at < ended:
                problems.append(f"{state.status} {state.id} keeps its {timer['kind']} timer {sort}")
    return problems


def no_run_queued_behind_a_free_slot(world: World) -> list[str]:
    """At quiescence a run waiting for a slot (pending, queued, not suspended) has no free
    slot of its key: admission always follows a freed slot."""
    problems = []
    for kind in TYPES:
        if kind not in LIMITS:
            continue
        for key in ("", "a", "b"):
            partition = keys.concurrency_partition(kind, key)
            held = list(world.store.scan(partition, keys.SLOT_PREFIX))
            if len(held) >= LIMITS[kind]:
                continue
            for _, value in world.store.scan(partition, keys.QUEUE_PREFIX):
                wf = str(decode(value)["id"])
                data = world.store.get(keys.state_key(wf))
                state = None if data is None else WorkflowState.from_bytes(data)
                if state is not None and state.status == PENDING:
                    problems.append(f"{wf} waits for {kind}/{key!r} with {len(held)} slot(s) held")
    return problems


def finalizers_ran(world: World) -> list[str]:
    """Every finalizer a cancelled or timed-out run registered ran at least once (or was
    dead-lettered after its retries), and its teardown finished."""
    problems = []
    observer = _observer(world)
    for wf, state in _states(world).items():
        if state.status not in CANCEL_ENDS:
            continue
        partition = keys.workflow_partition(wf)
        prefix = f"{keys.FINALIZER_PREFIX}{keys.step_slot(state.first_step)}#"
        registered = [decode(decode(v)["v"]) for _, v in world.store.scan(partition, prefix)]
        if not registered:
            continue
        dead = {(d["input"]["run"], d["input"]["pos"]) for d in observer.list_dead_letters(wf)}
        for arg in registered:
            ran = world.finalizer_runs.get((wf, arg["run"], arg["pos"]), [])
            if not ran and (arg["run"], arg["pos"]) not in dead:
                problems.append(f"{state.status} {wf}: finalizer {arg['pos']} never ran")
            if arg["mode"] == "dead" and ran and (arg["run"], arg["pos"]) not in dead:
                problems.append(f"{wf}: finalizer {arg['pos']} failed for good, no dead letter")
        teardown = observer.describe(wf).teardown
        if teardown is not None and teardown["status"] != "completed":
            problems.append(f"{wf}: its teardown is still {teardown['status']}")
    return problems


def results_match_programs(world: World) -> list[str]:
    """A completed run returns the values its program computes, in program order, whatever
    order its branches finished in."""
    problems = []
    for wf, state in _states(world).items():
        if state.status != "completed" or state.type not in TYPES or state.result is None:
            continue
        want = expected(wf, decode(state.input)["prog"])
        have = decode(state.result).get("values")
        if not matches(have, want):
            problems.append(f"{wf} returned {have!r}, its program computes {want!r}")
    return problems


def heartbeats_carry_over(world: World) -> list[str]:
    """An attempt of a heartbeating step is handed the newest details of the attempt before
    it (none only when a fault hit in between); a run that ended on its own (every step
    ended) keeps no heartbeat record. One ended from outside keeps its last progress, and in
    mode none (one engine per store) a second engine's drive is not fenced out."""
    problems = []
    for (wf, step), beats in world.beats.items():
        for before, after in itertools.pairwise(beats):
            if after.attempt != before.attempt + 1 or after.faults != before.faults:
                continue
            if after.seen != f"{before.attempt}.1":
                problems.append(
                    f"{wf} step {step} attempt {after.attempt} was handed {after.seen!r}, "
                    f"attempt {before.attempt} last sent '{before.attempt}.1'"
                )
    for wf, state in _states(world).items() if world.ownership != "none" else ():
        if state.status in ("completed", "failed"):
            partition = keys.workflow_partition(wf)
            for sort, _ in world.store.scan(partition, keys.HEARTBEAT_PREFIX):
                problems.append(f"{state.status} {wf} keeps heartbeat record {sort}")
    return problems + [f"[overdue] {why}" for why in world.overdue]


def acknowledged_updates_are_applied(world: World) -> list[str]:
    """Every update an engine acknowledged is in its run's state, as replay rebuilds it.
    Not in mode none with several engines: a drive there is not fenced, and an update's
    record may land after another engine's drive ended the run."""
    if world.ownership == "none":
        return []
    problems = []
    observer = _observer(world)
    states = _states(world)
    for wf, acked in world.updates_ok.items():
        if wf not in states or states[wf].type not in TYPES:
            continue
        try:
            approved = observer.query(wf, "where")["approved"]
        except WeftError:
            continue
        if approved < len(acked):
            problems.append(f"{wf} acknowledged {len(acked)} update(s), applied {approved}")
    return problems


def schedules_stay_armed(world: World) -> list[str]:
    """A paused schedule points at no fire; a live one at its next fire, one of its spec's,
    whose timer is stored (after every write); at quiescence that fire is not overdue (by
    more than ``SCHEDULE_LATE``, plus the rounds the passes need to read past a flood's
    backlog, which hides a schedule's timer as it hides any other)."""
    problems = list(model(world).problems.get("schedules-stay-armed", []))
    late = SCHEDULE_LATE + world.backlog_rounds * QUIESCE_STEP
    for _, raw in world.store.scan(keys.SCHEDULE_PARTITION):
        record = ScheduleRecord.from_bytes(raw)
        if record.paused or record.next is None:
            continue
        timer = record.timer_key()
        if timer is None or world.store.get(timer) is None:
            problems.append(f"schedule {record.id} has no timer for its next fire")
        elif record.spec.due(record.id, record.next) < world.now - late:
            problems.append(f"schedule {record.id}'s fire at {record.next} is overdue")
    return problems


def bulk_operations_finish_exactly(world: World) -> list[str]:
    """At quiescence every bulk operation completed, and a signal or retry operation counts
    no run as done twice (it may count fewer: a run it acted on in a page a crash cut, that
    then left the filter, is not met again when the page is repeated)."""
    acted: dict[str, set[str]] = {}
    for key in model(world).acted:
        if key.sort.startswith(keys.BULK_RUN_PREFIX):  # a retry marker, in the run's partition
            op_id = keys.dec(key.sort[len(keys.BULK_RUN_PREFIX) :])
            acted.setdefault(op_id, set()).add(key.partition)
        else:
            signal_id = keys.dec(key.sort[len(keys.SIGNAL_ID_PREFIX) :])
            acted.setdefault(signal_id[len(BULK_SIGNAL) :], set()).add(key.partition)
    problems = list(world.bulk_problems)
    for operation in _observer(world).list_bulk_operations():
        if operation.status != "completed":
            problems.append(f"bulk {operation.id} is still {operation.status}")
        elif operation.kind != "cancel" and operation.done > len(acted.get(operation.id, ())):
            problems.append(
                f"bulk {operation.kind} {operation.id} counts {operation.done} done, acted on "
                f"{len(acted.get(operation.id, ()))}"
            )
    return problems


def maps_respect_their_bound(world: World) -> list[str]:
    """A ``map`` never has more attempts running at once than its ``max_concurrency``
    (checked as each item runs on the simulated threads)."""
    return list(world.unbounded)


def listings_match_runs(world: World) -> list[str]:
    """``list`` for a filter names exactly the runs a full read finds, each once, and
    ``count`` agrees with it: during the run (the ``list`` action, when nothing moved in
    its middle) and at quiescence, for every filter."""
    observer = _observer(world)
    final = [
        line
        for index in range(len(LIST_FILTERS))
        for line in compare_listing(observer, world.store, world.known_runs, index)
    ]
    return list(world.listing_problems) + [f"at quiescence: {line}" for line in final]


def _observer(world: World) -> Engine:
    """A fresh engine on the store, outside the fault plan, to read and replay."""
    return world.observer()
