"""Randomised multi-engine run: 4 engines in threads on one store, 100 workflows, chaos.

Four engines, each on its own thread and its own storage handle, share one store and one
``VirtualClock`` under ``ownership="workflow-lease"``. A controller runs rounds: it moves the
clock, then hands every engine one action (start workflows, send signals, run maintenance,
resume a workflow, crash) that the engines carry out concurrently, inside a serverless
invocation scope or not. Engines also pause inside an activity for several rounds (their claims
lapse and are taken over) and crash inside one (the process dies mid-step); a dead engine comes
back later as a new incarnation (a new engine id), which recovers what it can.

After the run it checks, from a journal of every write and a log of every activity execution:

* every workflow completed with the result its inputs determine;
* no op record was put twice (every step record written once);
* every owner record (op, pending, attempt) landed fenced on the epoch current at commit, from
  the engine holding that epoch: no write by a deposed owner landed;
* an activity ran more than once only where the claim of the engine running it expired and was
  taken over before that engine committed the step (counted and reported, split by whether the
  engine had crashed or was alive but paused).

The seed is ``WEFT_RANDOM_SEED`` (default below) and is printed with every failure. It fixes
the workflows, the clock steps and every action the controller hands out; with
``WEFT_RANDOM_SERIAL=1`` the engines take their actions one at a time in a seeded order, so a run
replays exactly (``test_serial_run_replays_exactly_from_its_seed`` pins that).

Backends: memory and DynamoDB over moto's HTTP server (``dynamodb-http``, taken from the
registry in ``tests/conftest.py``; ``--storage`` deselects as usual). Memory is cheap, so it
makes five consecutive runs (seeds SEED .. SEED + 4) with a harsher mix; the HTTP profile makes
one run with shorter workflows (1-2 steps) to stay well under a minute.
"""

from __future__ import annotations

import os
import queue
import random
import re
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
from ownership_support import (
    Journal,
    RecordingStorage,
    Write,
    fencing_violations,
    rewritten_op_records,
    step_commit_epochs,
)

from weft_serverless import Engine, WorkflowDefinition, workflow
from weft_serverless.codec import decode
from weft_serverless.engine.ownership import unpack_epoch
from weft_serverless.engine.ownership.base import stored_owner
from weft_serverless.engine.persistence.run_head import Head
from weft_serverless.errors import WorkflowClaimUnavailableError, WorkflowNotRunningError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Put, Storage
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.testing import SimulatedCrash, VirtualClock

DEFAULT_SEED = 20260512
SEED = int(os.environ.get("WEFT_RANDOM_SEED", DEFAULT_SEED))
SERIAL = os.environ.get("WEFT_RANDOM_SERIAL", "") == "1"
MOD = 1_000_003
TTL, RENEW = 3.0, 1.0  # takeover after 3 + 2 x 1 = 5 s without renewal
ROUND_TIMEOUT = 120.0  # real seconds a round may take before the run is declared stuck

Opener = Callable[[], Storage]
Gen = Generator[Any, Any, Any]


@dataclass(frozen=True)
class Profile:
    """Size and mix of one run."""

    workflows: int = 100
    engines: int = 4
    steps: tuple[int, int] = (3, 6)
    kinds: tuple[tuple[str, float], ...] = (("a", 0.45), ("p", 0.1), ("s", 0.25), ("g", 0.2))
    max_rounds: int = 3000
    invocation_share: float = 0.5
    idle_share: float = 0.0  # rounds in which an engine is not invoked at all
    crash_rate: float = 0.015  # an engine dies between two actions
    arm_rate: float = 0.045  # an engine will pause or die inside its next activity
    runs: int = 1  # consecutive runs per test, seeds SEED, SEED + 1, ... (one store, new ids)
    max_sleep: float = 4.0


PROFILES = {
    # Cheap on memory: five seeded runs (SEED .. SEED + 4) of a harsher mix, each on fresh ids.
    "memory": Profile(steps=(3, 8), crash_rate=0.03, arm_rate=0.1, idle_share=0.2, runs=5),
    # moto over HTTP costs ~4-13 ms a request: shorter workflows, more invocation scopes (they
    # release parked claims, which keeps the reclaim scan short), still 4 engines x 100 runs.
    "dynamodb-http": Profile(
        steps=(1, 2),
        kinds=(("a", 0.5), ("s", 0.25), ("g", 0.25)),
        invocation_share=0.8,
        idle_share=0.3,
        max_sleep=2.0,
    ),
}


# -- the registry ----------------------------------------------------------------------------------


def backend_registry(config: pytest.Config) -> dict[str, Any]:
    """``BACKENDS`` of ``tests/conftest.py``, found among the loaded plugins (importing
    ``conftest`` by name is ambiguous: tests/dynamodb has one too)."""
    for plugin in config.pluginmanager.get_plugins():
        backends = getattr(plugin, "BACKENDS", None)
        if isinstance(backends, dict) and "memory" in backends:
            return backends
    raise RuntimeError("tests/conftest.py BACKENDS registry not loaded")


@pytest.fixture(
    params=[pytest.param(name, marks=pytest.mark.storage(name), id=name) for name in PROFILES]
)
def chaos_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Opener]]:
    """An empty store on memory or dynamodb-http (``--storage`` deselects as usual)."""
    opener = backend_registry(request.config)[request.param](request, tmp_path)
    opened: list[Storage] = []

    def open_storage() -> Storage:
        handle = opener()
        if all(handle is not seen for seen in opened):
            opened.append(handle)
        return handle

    yield request.param, open_storage
    for handle in opened:
        handle.close()


# -- workflows and their expected results ---------------------------------------------------------


def activity_value(wf: str, step: int, branch: int, x: int) -> int:
    return (x * 31 + step * 7 + branch * 3 + zlib.crc32(wf.encode())) % MOD


def signal_value(wf: str, k: int) -> int:
    return zlib.crc32(f"{wf}#{k}".encode()) % 1000


def mixed(ctx: Any, spec: dict[str, Any]) -> Gen:
    """Activities (``a``), pairs of parallel activities (``p``), sleeps (``s``), signals (``g``)."""
    wf = ctx.workflow_id
    total = spec["start"]
    for i, (kind, arg) in enumerate(spec["steps"]):
        if kind == "a":
            total = yield ctx.run("work", {"wf": wf, "step": i, "branch": -1, "x": total})
        elif kind == "p":
            left, right = yield ctx.all(
                ctx.run("work", {"wf": wf, "step": i, "branch": 0, "x": total}),
                ctx.run("work", {"wf": wf, "step": i, "branch": 1, "x": total}),
            )
            total = (left + right) % MOD
        elif kind == "s":
            yield ctx.sleep(arg)
        else:
            total = (total + (yield ctx.wait_for_signal("go"))) % MOD
    return total


def expected_result(wf: str, spec: dict[str, Any]) -> int:
    total, k = spec["start"], 0
    for i, (kind, _) in enumerate(spec["steps"]):
        if kind == "a":
            total = activity_value(wf, i, -1, total)
        elif kind == "p":
            total = (activity_value(wf, i, 0, total) + activity_value(wf, i, 1, total)) % MOD
        elif kind == "g":
            total = (total + signal_value(wf, k)) % MOD
            k += 1
    return total


def make_specs(rng: random.Random, profile: Profile, prefix: str) -> dict[str, dict[str, Any]]:
    kinds, weights = zip(*profile.kinds, strict=True)
    specs = {}
    for n in range(profile.workflows):
        steps: list[tuple[str, float]] = []
        for _ in range(rng.randint(*profile.steps)):
            kind = rng.choices(kinds, weights)[0]
            steps.append(
                (kind, round(rng.uniform(0.5, profile.max_sleep), 1) if kind == "s" else 0)
            )
        if not any(kind in "ap" for kind, _ in steps):
            steps[rng.randrange(len(steps))] = ("a", 0)
        specs[f"{prefix}wf-{n:03d}"] = {"start": rng.randrange(MOD), "steps": steps}
    return specs


# -- the execution log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Execution:
    """One run of an activity: where, by which engine incarnation, on which claim."""

    op_key: str
    engine: str
    epoch: int | None  # the epoch of the claim its engine held when the activity started


@dataclass
class Stats:
    rounds: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    crashes: int = 0
    restarts: int = 0
    pauses: int = 0
    claim_unavailable: int = 0
    trace: list[str] = field(default_factory=list)

    def count(self, name: str) -> None:
        self.actions[name] = self.actions.get(name, 0) + 1


_current = threading.local()


class Worker:
    """One engine slot: a thread that carries out the actions the controller hands it."""

    def __init__(self, harness: Harness, index: int) -> None:
        self.h = harness
        self.name = f"e{index}"
        self.incarnation = 0
        self.engine: Engine | None = None
        self.storage: RecordingStorage | None = None
        self.state = "dead"
        self.arm: str | None = None  # "pause" or "crash" at the next activity
        self.gate = threading.Event()
        self.crash_on_release = False
        self.wake_round = 0  # release a pause / restart a dead engine at this round
        self.inbox: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    @property
    def engine_id(self) -> str:
        return f"{self.name}.{self.incarnation}"

    def _loop(self) -> None:
        _current.worker = self
        while True:
            action = self.inbox.get()
            if action is None:
                return
            try:
                action()
            except SimulatedCrash:
                self.die()
            except BaseException as exc:
                self.h.problem(f"{self.engine_id}: unexpected {type(exc).__name__}: {exc}")
            finally:
                self.h.finished(self)

    def die(self) -> None:
        if self.storage is not None:
            self.storage.kill()
        with self.h.lock:
            if self.engine is not None or self.storage is not None:
                self.h.stats.crashes += 1
                self.h.crashed.add(self.engine_id)
        self.engine, self.storage = None, None

    def restart(self) -> None:
        self.incarnation += 1
        self.storage = RecordingStorage(self.h.opener(), self.engine_id, self.h.journal)
        self.engine = Engine.create(
            self.storage,
            self.h.flows,
            ownership="workflow-lease",
            background_tasks="manual",
            clock=self.h.clock,
            engine_id=self.engine_id,
            workflow_claim_ttl=TTL,
            workflow_claim_renew_interval=RENEW,
            recover=False,  # recover below, once self.engine is set (activities look at it)
            # An engine here is its thread: an activity finds its engine (to pause or crash
            # it) by thread, so branches run on that thread, one after another.
            max_parallel_activities=0,
        )
        self.engine.recover_all()

    def crash(self, what: str) -> NoReturn:
        """The process dies here: from this instant its storage handle refuses everything, so
        no ``finally`` on the way up (invocation exit, claim release) can write."""
        assert self.storage is not None
        self.storage.kill()
        raise SimulatedCrash(f"{self.engine_id} {what}")

    def in_activity(self, arg: dict[str, Any]) -> int:
        """Body of the ``work`` activity on this engine's thread: log, maybe pause or crash."""
        wf, step, branch = arg["wf"], arg["step"], arg["branch"]
        slot = (
            keys.step_slot(step) if branch < 0 else keys.branch_slot(keys.step_slot(step), branch)
        )
        assert self.engine is not None
        claim = self.engine.runtime.fence.claims.get(wf)  # type: ignore[attr-defined]
        epoch = None if claim is None else unpack_epoch(claim.epoch_bytes)
        arm, self.arm = self.arm, None
        if arm == "crash-before":
            self.crash(f"died before the side effect of {wf}/{slot}")
        self.h.executed(
            Execution(
                f"{keys.workflow_partition(wf)}/{keys.OP_PREFIX}{slot}", self.engine_id, epoch
            )
        )
        if arm == "pause":
            self.h.paused(self)
            self.gate.wait()
            self.gate.clear()
            if self.crash_on_release:
                self.crash(f"died after a pause in {wf}/{slot}")
        if arm == "crash-after":
            self.crash(f"died after the side effect of {wf}/{slot}")
        return activity_value(wf, step, branch, arg["x"])


def work(arg: dict[str, Any]) -> int:
    worker: Worker = _current.worker
    return worker.in_activity(arg)


FLOWS: dict[str, WorkflowDefinition] = {
    "mixed": workflow("mixed").activities(work=work).execute(mixed)
}


class Harness:
    """The controller: rounds of clock steps and actions, then the invariant checks."""

    def __init__(
        self, opener: Opener, profile: Profile, seed: int, serial: bool, prefix: str = ""
    ) -> None:
        self.opener = opener
        self.profile = profile
        self.seed = seed
        self.serial = serial
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.journal = Journal()
        self.flows = FLOWS
        self.specs = make_specs(self.rng, profile, prefix)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.busy: set[str] = set()
        self.executions: list[Execution] = []
        self.problems: list[str] = []
        self.stats = Stats()
        self.unstarted = list(self.specs)
        self.started: list[str] = []
        self.signals_confirmed = dict.fromkeys(self.specs, 0)
        self.signals_needed = {
            wf: sum(1 for kind, _ in spec["steps"] if kind == "g")
            for wf, spec in self.specs.items()
        }
        self.crashed: set[str] = set()
        self.workers = [Worker(self, n + 1) for n in range(profile.engines)]
        self.reader = opener()

    # -- called from worker threads --------------------------------------------------------------

    def executed(self, execution: Execution) -> None:
        with self.lock:
            self.executions.append(execution)

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)

    def paused(self, worker: Worker) -> None:
        with self.changed:
            worker.state = "paused"
            self.stats.pauses += 1
            self.busy.discard(worker.name)
            self.changed.notify_all()

    def finished(self, worker: Worker) -> None:
        with self.changed:
            worker.state = "idle" if worker.engine is not None else "dead"
            self.busy.discard(worker.name)
            self.changed.notify_all()

    # -- the controller --------------------------------------------------------------------------

    def hand(self, worker: Worker, name: str, action: Callable[[], None]) -> None:
        with self.changed:
            worker.state = "busy"
            self.busy.add(worker.name)
            self.stats.count(name)
            self.stats.trace.append(f"{self.stats.rounds}:{worker.name}:{name}")
        worker.inbox.put(action)
        if self.serial:
            self.settle()

    def release(self, worker: Worker) -> None:
        with self.changed:
            worker.state = "busy"
            self.busy.add(worker.name)
            self.stats.trace.append(f"{self.stats.rounds}:{worker.name}:release")
        worker.gate.set()
        if self.serial:
            self.settle()

    def settle(self) -> None:
        """Wait until no worker is running an action (paused ones do not count)."""
        deadline = time.monotonic() + ROUND_TIMEOUT
        with self.changed:
            while self.busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"round {self.stats.rounds}: stuck workers {self.busy}")
                self.changed.wait(remaining)

    def run(self) -> None:
        for worker in self.workers:
            worker.thread.start()
        try:
            for worker in self.workers:
                self.hand(worker, "restart", worker.restart)
            self.settle()
            while not self.finished_all():
                self.stats.rounds += 1
                if self.stats.rounds > self.profile.max_rounds:
                    raise AssertionError(self.stuck_report())
                self.clock.advance(round(self.rng.uniform(0.2, 0.6), 3))
                order = list(self.workers)
                self.rng.shuffle(order)
                for worker in order:
                    self.step(worker)
                self.settle()
        finally:
            for worker in self.workers:
                if worker.state == "paused":
                    worker.crash_on_release = False
                    self.release(worker)
            self.settle()
            for worker in self.workers:
                worker.inbox.put(None)
            for worker in self.workers:
                worker.thread.join(30)

    def step(self, worker: Worker) -> None:
        rng, now = self.rng, self.stats.rounds
        if worker.state == "dead":
            if worker.wake_round == 0:
                worker.wake_round = now + rng.randint(2, 15)
            elif now >= worker.wake_round:
                worker.wake_round = 0
                with self.lock:
                    self.stats.restarts += 1
                self.hand(worker, "restart", worker.restart)
            return
        if worker.state == "paused":
            if worker.wake_round == 0:
                worker.wake_round = now + rng.randint(2, 25)
                worker.crash_on_release = rng.random() < 0.1
            elif now >= worker.wake_round:
                worker.wake_round = 0
                self.release(worker)
            return
        if rng.random() < self.profile.idle_share:
            return
        roll = rng.random()
        if roll < self.profile.crash_rate:
            self.hand(worker, "crash", worker.die)
            return
        if roll < self.profile.crash_rate + self.profile.arm_rate and worker.arm is None:
            worker.arm = rng.choice(["pause", "pause", "crash-before", "crash-after"])
        scope = rng.random() < self.profile.invocation_share
        tiny_budget = scope and rng.random() < 0.05
        choice = rng.random()
        with self.lock:
            size = min(len(self.unstarted), rng.randint(1, 5))
            batch = [self.unstarted.pop(0) for _ in range(size)] if choice < 0.25 else []
        if batch:
            self.hand(
                worker, "start", self.scoped(worker, scope, tiny_budget, self.start(worker, batch))
            )
        elif choice < 0.45 and (targets := self.signal_targets(rng)):
            self.hand(
                worker,
                "signal",
                self.scoped(worker, scope, tiny_budget, self.signal(worker, targets)),
            )
        elif choice < 0.5 and self.started:
            target = rng.choice(self.started)
            self.hand(
                worker,
                "resume",
                self.scoped(worker, scope, tiny_budget, self.resume(worker, target)),
            )
        else:
            self.hand(
                worker,
                "maintenance",
                self.scoped(worker, scope, tiny_budget, lambda: worker.engine.run_maintenance()),  # type: ignore[union-attr]
            )

    def scoped(
        self, worker: Worker, scope: bool, tiny: bool, body: Callable[[], object]
    ) -> Callable[[], None]:
        def action() -> None:
            engine = worker.engine
            assert engine is not None
            budget = 0.5 if tiny else 900.0
            with (
                engine.invocation(time_left=lambda: budget, heartbeat=False)
                if scope
                else nullcontext()
            ):
                body()

        return action

    def start(self, worker: Worker, batch: list[str]) -> Callable[[], None]:
        def body() -> None:
            for wf in list(batch):
                assert worker.engine is not None
                try:
                    worker.engine.start("mixed", self.specs[wf], id=wf, idempotency_key=wf)
                except SimulatedCrash:
                    with self.lock:  # it may have been created: retry later (idempotent)
                        self.unstarted.extend(batch)
                    raise
                batch.remove(wf)
                with self.lock:
                    self.started.append(wf)

        return body

    def signal_targets(self, rng: random.Random) -> list[str]:
        waiting = [
            wf for wf in self.started if self.signals_confirmed[wf] < self.signals_needed[wf]
        ]
        return rng.sample(waiting, min(len(waiting), rng.randint(1, 3))) if waiting else []

    def signal(self, worker: Worker, targets: list[str]) -> Callable[[], None]:
        def body() -> None:
            for wf in targets:
                assert worker.engine is not None
                k = self.signals_confirmed[wf]
                try:
                    worker.engine.signal(wf, "go", signal_value(wf, k), signal_id=f"{wf}#{k}")
                except WorkflowNotRunningError:
                    # An earlier send of this signal id crashed after its delivery landed, and
                    # the run consumed it and finished: every signal it needed did arrive.
                    with self.lock:
                        self.stats.count("signal-after-completion")
                        self.signals_confirmed[wf] = self.signals_needed[wf]
                    continue
                with self.lock:
                    self.signals_confirmed[wf] = k + 1

        return body

    def resume(self, worker: Worker, wf: str) -> Callable[[], None]:
        def body() -> None:
            assert worker.engine is not None
            try:
                worker.engine.resume(wf)
            except WorkflowClaimUnavailableError:
                with self.lock:
                    self.stats.claim_unavailable += 1

        return body

    def finished_all(self) -> bool:
        if self.unstarted or any(
            self.signals_confirmed[wf] < self.signals_needed[wf] for wf in self.specs
        ):
            return False
        if self.stats.rounds % 5:
            return False
        completed = set()
        for shard in range(keys.STATUS_SHARDS):
            for sort, _ in self.reader.scan(keys.status_partition("completed", shard)):
                completed.add(keys.status_entry_id(sort))
        return completed >= set(self.specs)

    def stuck_report(self) -> str:
        lines = [f"seed {self.seed}: not finished after {self.profile.max_rounds} rounds"]
        for wf in self.specs:
            data = self.reader.get(keys.state_key(wf))
            status = None if data is None else decode(data)["status"]
            if status != "completed":
                holder = stored_owner(self.reader, wf)
                lines.append(
                    f"  {wf}: {status}, holder {holder}, "
                    f"epoch {unpack_epoch(self.reader.get(keys.owner_epoch_key(wf)))}, "
                    f"signals {self.signals_confirmed[wf]}/{self.signals_needed[wf]}"
                )
        return "\n".join(lines[:40])

    # -- the checks ----------------------------------------------------------------------------

    def verify(self) -> dict[str, Any]:
        """Check every invariant; returns the report (duplicates counted by cause)."""
        problems = list(self.problems)
        for wf, spec in self.specs.items():
            data = self.reader.get(keys.state_key(wf))
            state = None if data is None else decode(data)
            if state is None or state["status"] != "completed":
                problems.append(
                    f"{wf}: not completed ({None if state is None else state['status']})"
                )
                continue
            result = decode(state["result"])
            if result != expected_result(wf, spec):
                problems.append(f"{wf}: result {result}, expected {expected_result(wf, spec)}")
        for key, count in rewritten_op_records(self.journal).items():
            problems.append(f"op record {key} put {count} times")
        problems += fencing_violations(self.journal)
        duplicates = self.classify_duplicates(problems)
        report = {
            "seed": self.seed,
            "rounds": self.stats.rounds,
            "actions": dict(sorted(self.stats.actions.items())),
            "crashes": self.stats.crashes,
            "restarts": self.stats.restarts,
            "pauses": self.stats.pauses,
            "claim_unavailable": self.stats.claim_unavailable,
            "activity_executions": len(self.executions),
            "takeovers": self.takeovers(),
            "writes": len(self.journal.writes),
            "duplicate_executions": duplicates,
        }
        assert not problems, f"seed {self.seed} ({_rerun(self.seed)}):\n" + "\n".join(problems[:40])
        return report

    def takeovers(self) -> int:
        return sum(1 for _, how, _ in self.epoch_mints().values() if how == "takeover")

    def epoch_mints(self) -> dict[tuple[str, int], tuple[str, str, int]]:
        """(workflow partition, epoch) -> (engine, "acquire"|"takeover"|"rotate", write seq)."""
        mints: dict[tuple[str, int], tuple[str, str, int]] = {}
        for write in self.journal.writes:
            if not write.committed:
                continue
            for op in write.ops:
                if not isinstance(op, Put):
                    continue
                if op.key.sort == keys.OWNER_HEAD and _same_epoch(write, op):
                    continue  # a step, a renewal or a release of layout 3: no new epoch
                if op.key.sort == keys.OWNER_HEAD and Head.from_bytes(op.value).holder:
                    self._head_mint(mints, write, op)  # layout 3: the head holds the claim
                    continue
                if op.key.sort == keys.OWNER_EPOCH:
                    epoch = unpack_epoch(op.value)
                elif op.key.sort == keys.OWNER_HEAD and len(write.ops) > 1:
                    epoch = Head.from_bytes(op.value).epoch  # a claim moves only the head
                else:
                    continue
                holder = write.condition_on(keys.owner_holder_key(keys.dec(op.key.partition[3:])))
                how = (
                    "rotate"
                    if holder is None
                    else ("acquire" if holder.expected is None else "takeover")
                )
                mints[(op.key.partition, epoch)] = (write.engine, how, write.seq)
        return mints

    @staticmethod
    def _head_mint(
        mints: dict[tuple[str, int], tuple[str, str, int]], write: Write, op: Put
    ) -> None:
        """A head put carrying a holder (layout 3): a claim if it moves the epoch, a takeover
        when the head it replaced held one (a renewal, or a step, keeps the epoch)."""
        expected = write.condition_on(op.key)
        before = None if expected is None or expected.expected is None else expected.expected
        old = None if before is None else Head.from_bytes(before)
        how = "takeover" if old is not None and old.holder is not None else "acquire"
        mints[(op.key.partition, Head.from_bytes(op.value).epoch)] = (write.engine, how, write.seq)

    def classify_duplicates(self, problems: list[str]) -> dict[str, int]:
        """Every activity execution beyond one per step must be explained by a takeover."""
        committed: dict[str, tuple[int, str]] = {}
        for write in self.journal.writes:
            if not write.committed:
                continue
            for name, epoch in step_commit_epochs(write).items():
                committed[name] = (epoch, write.engine)
        mints = self.epoch_mints()
        by_step: dict[str, list[Execution]] = {}
        for execution in self.executions:
            by_step.setdefault(execution.op_key, []).append(execution)
        counts = {"after_crash": 0, "after_pause": 0}
        for op_key, runs in by_step.items():
            if op_key not in committed:
                problems.append(f"{op_key}: activity ran but its step was never committed")
                continue
            epoch, writer = committed[op_key]
            winners = [r for r in runs if r.epoch == epoch]
            if len(winners) != 1 or winners[0].engine != writer:
                problems.append(
                    f"{op_key}: {len(winners)} runs on the committing epoch {epoch}: {runs}"
                )
            for run in runs:
                if run.epoch == epoch:
                    continue
                partition = op_key.split("/", 1)[0]
                mint = mints.get((partition, (run.epoch or 0) + 1))
                if run.epoch is None or run.epoch > epoch or mint is None or mint[1] != "takeover":
                    problems.append(
                        f"{op_key}: ran again on epoch {run.epoch} by {run.engine} without its "
                        f"claim being taken over (next epoch minted by {mint})"
                    )
                    continue
                counts["after_crash" if run.engine in self.crashed else "after_pause"] += 1
        return counts


def _rerun(seed: int) -> str:
    return f"rerun: WEFT_RANDOM_SEED={seed} [WEFT_RANDOM_SERIAL=1 replays the schedule exactly]"


def test_four_engines_drive_100_workflows_through_pauses_crashes_and_restarts(
    chaos_store: tuple[str, Opener], record_property: Callable[[str, object], None]
) -> None:
    """The multi-engine invariants hold on seeded random runs of 100 workflows on 4 engines:
    right results, every step record written once, no write by a deposed owner landed, and
    activities re-ran only where the claim of the engine running them was taken over (these
    re-runs are counted and reported). Each run must also have exercised crashes, restarts,
    pauses, takeovers, signals and explicit resumes."""
    backend, opener = chaos_store
    profile = PROFILES[backend]
    for run in range(profile.runs):
        seed = SEED + run
        harness = Harness(opener, profile, seed, SERIAL, prefix=f"r{run}-")
        began = time.monotonic()
        try:
            harness.run()
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} ({_rerun(seed)}): {exc}") from None
        report = harness.verify()
        report["seconds"] = round(time.monotonic() - began, 1)
        print(f"\nmulti-engine random run on {backend}: {report}")
        record_property(f"multi_engine_report_{run}", report)
        # The run exercised what it claims to (a degenerate schedule must not pass silently).
        exercised = (
            report["crashes"] >= 1
            and report["restarts"] >= 1
            and report["pauses"] >= 1
            and report["takeovers"] >= 1
            and report["actions"].get("signal", 0) >= 10
            and report["actions"].get("resume", 0) >= 1
        )
        assert exercised, f"seed {seed}: the schedule did not exercise the run: {report}"


def _same_epoch(write: Write, op: Put) -> bool:
    """A head put on the epoch of the head it expects (it mints no epoch)."""
    expected = write.condition_on(op.key)
    if expected is None or expected.expected is None:
        return False
    return Head.from_bytes(expected.expected).epoch == Head.from_bytes(op.value).epoch


def _stable(key: str) -> str:
    """A key without process-wide sequence counters and process tags (signal and budget-timer
    keys carry them; they differ from one run in a process to the next)."""
    return re.sub(r"\.\d{8}(\.[0-9a-f]{6})?(?=$|[#/])", ".<seq>", key)


def test_serial_run_replays_exactly_from_its_seed() -> None:
    """Reproducible from its seed: two serial runs with one seed (on memory, 4 engines, 30
    workflows) hand out the same actions and make the same writes, to the same keys, in the
    same order (keys compared without the process-wide sequence counters they carry)."""

    def one_run() -> tuple[list[str], list[tuple[str, bool, tuple[str, ...]]]]:
        store = MemoryStorage()
        harness = Harness(lambda: store, Profile(workflows=30), SEED, serial=True)
        harness.run()
        harness.verify()
        writes = [
            (
                w.engine,
                w.committed,
                tuple(_stable(f"{op.key.partition}/{op.key.sort}") for op in w.ops),
            )
            for w in harness.journal.writes
        ]
        return harness.stats.trace, writes

    first, second = one_run(), one_run()
    assert first[0] == second[0], f"seed {SEED}: the action schedule differs between runs"
    assert first[1] == second[1], f"seed {SEED}: the write sequence differs between runs"
