"""The simulated world: several engines on one store, one seeded schedule, one thread.

A ``Scenario`` is data (JSON-able): the engines, a list of actions and a fault plan. The
``World`` carries out the actions one at a time in order, each on the engine it names, with a
virtual clock per engine (the world's time plus a bounded skew). Activities that run beside
others run on ``SimThreads``, which finishes them one at a time in a seeded order on this
same thread. Nothing runs on a thread and nothing reads the wall clock, so a scenario replays
exactly. What the workload and the operator can do is the table ``sim_actions.ACTIONS``.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from weft_serverless.engine.engine import Engine
from weft_serverless.engine.inspection import read_only_engine
from weft_serverless.engine.persistence.wakeups import WAKE_GRACE
from weft_serverless.engine.process.timer_hints import TimerHint
from weft_serverless.errors import WeftError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Storage
from weft_serverless.testing import SimulatedCrash
from weft_serverless.testing.sim_actions import (
    ACTIONS,
    INTERVENTIONS,
    SCOPES,
    ActionSpec,
    preemption,
)
from weft_serverless.testing.sim_commands import HEARTBEAT_TIMEOUT
from weft_serverless.testing.sim_executor import Hung, SimThreads
from weft_serverless.testing.sim_faults import FaultyStorage
from weft_serverless.testing.sim_hints import QueuedHints
from weft_serverless.testing.sim_observer import Observing
from weft_serverless.testing.sim_quiescence import quiesce
from weft_serverless.testing.sim_records import Beat, Execution, JournalEntry, Scenario
from weft_serverless.testing.sim_slots import Slot, own_activity_context
from weft_serverless.testing.sim_steps import StepLedger
from weft_serverless.testing.sim_store_model import StoreModel
from weft_serverless.testing.sim_workload import SimFailure, build_workflows

T0 = 1_767_225_600.0
TTL, RENEW = 3.0, 1.0  # a stale claim is taken over after 3 + 2 x 1 = 5 s without renewal
MAX_SKEW = 0.4  # seconds an engine's clock may stray from the world's (below RENEW)
STALL = TTL + 2 * RENEW + 1.5  # a stall outlives the claim and its grace
LONG_STALL = WAKE_GRACE + 1.0  # a stall outlives a run's wake-up grace: another engine drives it
HANG = HEARTBEAT_TIMEOUT + 1.0  # a hung attempt outlives its heartbeat timeout
HANG_CHANCE = 0.5  # share of first attempts of a heartbeating activity that hang
PARALLEL = (0, 2, 4)
"""``max_parallel_activities`` an engine incarnation draws: 0 runs branches one after another
on the drive's thread (the inline path), more runs them together on ``SimThreads``."""


def _workflow_of(partition: str) -> str | None:
    return keys.dec(partition[3:]) if partition.startswith("wf#") else None


class World(Observing):
    """Runs one scenario on one store; the invariant checker reads what it recorded."""

    def __init__(self, scenario: Scenario, storage: Storage) -> None:
        super().__init__()
        self.scenario = scenario
        self.store = storage
        self.ownership = scenario.ownership
        self.now = T0
        self.rng = random.Random(scenario.seed ^ 0x5EED)
        random.seed(scenario.seed)  # the engine picks concurrency slots with ``random``
        self.slots = [Slot(i) for i in range(scenario.engines)]
        self.acting: list[Slot] = []
        self.doing: list[tuple[str, list[Any]]] = []  # the actions in progress, outermost first
        self.flows = build_workflows(self)
        self.counters: dict[str, int] = dict.fromkeys(
            ("read", "write", "start", "shared", "activity", "invocation-end"), 0
        )
        self.plan = {(c, int(n)): kind for c, n, kind in scenario.faults}
        self.fired: list[tuple[str, int, str, str]] = []  # (counter, n, kind, engine id)
        self.journal: list[JournalEntry] = []
        self.executions: dict[tuple[str, int, str, int], list[Execution]] = {}
        self.started: set[str] = set()
        self.interventions: dict[str, list[int]] = {}  # ticks of operator moves, per run
        # (slot, run) -> the tick of its drive's history read, and the slot's faults then
        self.drive_starts: dict[tuple[int, str], tuple[int, int]] = {}
        self.ticks = 0
        self.moves = 0  # moves other engines made in the middle of a call (preempt, stall)
        self.problems: list[str] = []
        self.faults_on = True
        self.floods = 0
        self.late_timers: list[str] = []  # timers still due after LATE_PASSES rounds (or more)
        self.backlog_rounds = 0  # rounds of passes quiescence allows for the flood's backlog
        self.known_runs: dict[str, None] = {}  # every run written so far, in order
        self.workers = max(1, scenario.workers)  # maintenance workers sharing the shards
        self.hints: list[TimerHint] = []  # hints sent and not delivered yet (a queue)
        self.hint_problems: dict[str, list[str]] = {}  # by invariant, found at ``hint`` calls
        self.skews: dict[str, float] = {}  # each engine incarnation's clock error
        self.model: StoreModel | None = None  # the journal replayed (by the invariants)
        self.steps: StepLedger | None = None  # the journal's steps (by the invariants)
        self._observer: Engine | None = None

    # -- engines -------------------------------------------------------------------------------

    def engine(self, slot: Slot) -> Engine | None:
        """The slot's engine, starting a new incarnation (which recovers) if it died or
        stopped itself (it lost the store-wide lease)."""
        if slot.engine is not None and slot.engine.runtime.closed:
            self.kill(slot, "stopped")
        if slot.engine is not None:
            return slot.engine
        slot.incarnation += 1

        def fault_for(counter: str, partition: str) -> str | None:
            return self._storage_fault(counter, slot, partition)

        def after_write(partition: str) -> None:
            self._preempt(slot, partition, at_write=True)

        def history_read(partition: str) -> None:
            wf = _workflow_of(partition)
            if wf is not None:
                self.drive_starts[(slot.index, wf)] = (self.clock_tick(), slot.faults)

        storage = FaultyStorage(
            self.store, fault_for, self._journal_for(slot), after_write, history_read
        )
        slot.storage = storage
        options = self.claim_options()
        skew = round(self.rng.uniform(-MAX_SKEW, MAX_SKEW), 3)  # this incarnation's clock error
        parallel = self.rng.choice(PARALLEL)
        self.skews[slot.engine_id] = skew
        if self.scenario.hint_horizon > 0:
            hints = QueuedHints(self.hints, self.scenario.hint_horizon, lambda: not storage.dead)
            options["timer_hints"] = hints

        def clock() -> float:
            return self.now + skew

        def create() -> None:
            slot.engine = Engine.create(
                storage,
                self.flows,
                ownership=self.ownership,  # type: ignore[arg-type]
                background_tasks="manual",
                clock=clock,
                engine_id=slot.engine_id,
                max_clock_skew=math.inf,
                recover=False,
                max_parallel_activities=parallel,
                **options,
            )
            threads = SimThreads(parallel, self.rng.randrange, self.drive_overdue)
            object.__setattr__(slot.engine.runtime, "activity_threads", threads)
            slot.threads = threads

        with self._acting(slot):
            self._guard(slot, "create", create)
            if slot.engine is None:  # the process failed to start: it tries again next time
                self.kill(slot, "start failed")
                return None
            self._guard(slot, "recover", slot.engine.recover_all)
        return slot.engine

    def observer(self) -> Engine:
        """An engine outside the fault plan that only reads (and replays) the store."""
        if self._observer is None:
            self._observer = read_only_engine(self.store, "checker", self.flows)
        return self._observer

    def claim_options(self) -> dict[str, Any]:
        if self.ownership == "workflow-lease":
            return {"workflow_claim_ttl": TTL, "workflow_claim_renew_interval": RENEW}
        if self.ownership == "lease":
            return {"lease_ttl": TTL, "lease_renew_interval": RENEW}
        return {}

    def crash_acting(self, why: str) -> None:
        """The engine carrying out the current action dies."""
        self.kill(self.acting[-1], why)

    def kill(self, slot: Slot, why: str) -> None:
        if slot.storage is not None:
            slot.storage.kill()
        if slot.threads is not None:
            slot.threads.close()
        slot.engine, slot.storage, slot.threads = None, None, None
        slot.faults += 1

    def _journal_for(self, slot: Slot) -> Callable[[Sequence[Condition], Sequence[Op], bool], None]:
        return self.journal_as(slot.engine_id)

    def journal_as(
        self, engine_id: str
    ) -> Callable[[Sequence[Condition], Sequence[Op], bool], None]:
        """What a storage handle calls after each write, to journal it under ``engine_id``
        and the action being carried out."""

        def record(conditions: Sequence[Condition], ops: Sequence[Op], ok: bool) -> None:
            action = self.doing[-1][0] if self.doing else ""
            clock = self.now + self.skews.get(engine_id, 0.0)
            entry = JournalEntry(
                engine_id, tuple(conditions), tuple(ops), ok, action, self.clock_tick(), clock
            )
            self.journal.append(entry)
            if ok:
                for op in ops:
                    if op.key.sort == keys.STATE and op.key.partition.startswith("wf#"):
                        self.known_runs.setdefault(keys.dec(op.key.partition[3:]), None)

        return record

    @contextmanager
    def _acting(self, slot: Slot) -> Iterator[None]:
        self.acting.append(slot)
        try:
            yield
        finally:
            self.acting.pop()

    # -- faults ----------------------------------------------------------------------------------

    def _next_fault(self, counter: str, slot: Slot) -> str | None:
        self.counters[counter] += 1
        if not self.faults_on:
            return None
        kind = self.plan.get((counter, self.counters[counter]))
        if kind is not None:
            self.fired.append((counter, self.counters[counter], kind, slot.engine_id))
            if not kind.startswith("preempt"):
                slot.faults += 1
        return kind

    def _storage_fault(self, counter: str, slot: Slot, partition: str) -> str | None:
        """The fault for this read or write; a preemption is carried out here, before it."""
        kind = self._next_fault(counter, slot)
        if kind in ("preempt-read", "preempt-write", "preempt-shared"):
            self._preempt(slot, partition, at_write=counter == "write")
            return None
        if kind == "stall-before-start":
            if len(self.acting) == 1:
                self._stall(slot, LONG_STALL)
            return None
        return kind  # "preempt-after-write" is carried out by the handle, once the write landed

    def _preempt(self, preempted: Slot, partition: str, at_write: bool) -> None:
        """Another engine makes one move in the middle of this one's call (one level deep),
        most often on what that call is about (a run or one of its children, a schedule, a
        bulk operation): races on one thing are the ones that matter."""
        if len(self.acting) > 1:
            return
        others = [slot for slot in self.slots if slot is not preempted]
        if not others or not self.known_runs:
            return
        slot = self.rng.choice(others)
        moves = preemption(self.rng, list(self.known_runs), self.schedules, partition, at_write)
        self.moves += 1
        with own_activity_context():
            for name, args in moves:
                self.act(slot, name, args, scope=self.rng.choice(SCOPES))
        for outer, outer_args in self.doing:  # an interrupted move may land only now
            if outer in INTERVENTIONS:
                self.intervene(outer_args[0])

    # -- the Observer protocol (called by the workload's activities) -----------------------------

    def activity_ran(self, workflow_id: str, step: int, tag: str, attempt: int) -> None:
        slot = self.acting[-1]
        runs = self.executions.setdefault((workflow_id, step, tag, attempt), [])
        drive, faults = self.drive_starts.get((slot.index, workflow_id), (0, 0))
        runs.append(Execution(slot.index, slot.faults, drive, self.clock_tick(), faults))
        self._activity_fault(slot)

    def _activity_fault(self, slot: Slot) -> None:
        """The engine may die or stall inside an activity (a finalizer's too)."""
        kind = self._next_fault("activity", slot)
        if kind == "crash-in-activity":
            self.kill(slot, kind)
            raise SimulatedCrash(f"{slot.engine_id} died inside an activity")
        if kind == "stall-in-activity" and len(self.acting) == 1:
            self._stall(slot, STALL)

    def finalized(self, arg: dict[str, Any], attempt: int) -> None:
        super().finalized(arg, attempt)
        self._activity_fault(self.acting[-1])

    def beat(self, workflow_id: str, step: int, attempt: int, seen: Any) -> None:
        self.note_beat(workflow_id, step, Beat(attempt, seen, len(self.fired), self.clock_tick()))

    def bounded(self, bound: int, what: str) -> None:
        """A ``map`` item runs: no more of its step's attempts are placed than its bound."""
        threads = self.acting[-1].threads
        if threads is not None and threads.running:
            placed = 1 + len(threads.queued) + len(threads.hung)
            if placed > bound:
                self.unbounded.append(f"{what}: {placed} attempts at once, bound {bound}")

    def hang(self, workflow_id: str, step: int, attempt: int) -> None:
        """A first attempt may hang for good (its thread stuck past its heartbeat timeout);
        only on the simulated threads, and only while faults are on."""
        threads = self.acting[-1].threads
        if threads is None or not threads.running or not self.faults_on or attempt != 1:
            return
        if self.rng.random() >= HANG_CHANCE:
            return
        self.hung.append((workflow_id, step, attempt))
        self.acting[-1].faults += 1  # a fault like a stall: its claim may lapse meanwhile
        if len(self.acting) == 1:
            self._stall(self.acting[-1], HANG)
        else:
            self.now += HANG
        raise Hung(f"attempt {attempt} of {workflow_id} step {step} hangs")

    def _stall(self, stalled: Slot, seconds: float) -> None:
        """The engine hangs for ``seconds`` (past its claim); the others carry on."""
        self.now += seconds
        self.moves += 1
        with own_activity_context():
            for slot in self.slots:
                if slot is not stalled:
                    self.act(slot, "maintain", [], scope=0)

    def disturbances(self) -> int:
        """A count that moves whenever anything but the acting engine's own call happens
        (a fault fired, another engine moved, an engine stalled or died)."""
        return len(self.fired) + self.moves + sum(slot.faults for slot in self.slots)

    def also(self, name: str, args: list[Any]) -> None:
        """The next engine carries out an action right after the acting one's (one level
        deep, as a preemption): e.g. a second maintenance worker on an overlapping share."""
        if len(self.acting) != 1:
            return
        slot = self.slots[(self.acting[-1].index + 1) % len(self.slots)]
        with own_activity_context():
            self.act(slot, name, args, scope=0)

    def clock_tick(self) -> int:
        """A sequence number for ordering what happened (drive starts, runs, operator moves)."""
        self.ticks += 1
        return self.ticks

    def intervene(self, workflow_id: str) -> None:
        self.interventions.setdefault(workflow_id, []).append(self.clock_tick())

    # -- running -----------------------------------------------------------------------------

    def run(self) -> None:
        for name, engine_index, scope, *args in self.scenario.actions:
            slot = self.slots[engine_index % len(self.slots)]
            self.act(slot, name, args, scope=int(scope))

    def act(self, slot: Slot, name: str, args: list[Any], *, scope: int) -> None:
        spec = ACTIONS[name]
        engine = self.engine(slot)
        if engine is None or slot.engine is None:  # failed to start, or died recovering
            return
        self.doing.append((name, args))
        try:
            self._carry_out(slot, engine, spec, name, args, scope)
        finally:
            self.doing.pop()

    def _carry_out(
        self, slot: Slot, engine: Engine, spec: ActionSpec, name: str, args: list[Any], scope: int
    ) -> None:
        with self._acting(slot):
            if not scope:
                self._guard(slot, name, lambda: spec.run(self, engine, args))
                return

            def invoke() -> None:
                time_left = (lambda: 0.0) if scope == 2 else None
                with engine.invocation(time_left=time_left, heartbeat=False):
                    try:
                        spec.run(self, engine, args)
                    finally:
                        if self._next_fault("invocation-end", slot) == "lost-invocation-end":
                            self.kill(slot, "lost invocation end")

            self._guard(slot, name, invoke)

    def _guard(self, slot: Slot, name: str, call: Callable[[], None]) -> None:
        """Run one call; expected refusals and injected faults are part of the game."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
        except SimulatedCrash:
            self.kill(slot, name)
        except (WeftError, SimFailure):
            pass
        except Exception as exc:  # anything else escaping the engine is a defect
            self.problems.append(f"{slot.engine_id} {name}: unexpected {type(exc).__name__}: {exc}")

    def quiesce(self) -> None:
        """Faults stop, every engine comes back, time runs on (``sim_quiescence``)."""
        quiesce(self)


__all__ = ["Scenario", "World"]
