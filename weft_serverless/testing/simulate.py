"""Deterministic simulation: seeded workloads and faults on several engines, checked by invariants.

Run ``python -m weft_serverless.testing.simulate --seed 7 --steps 60 --engines 3
--backend memory``; ``--seeds 500`` runs a range. A failing seed is shrunk (delta debugging
over its actions and its fault plan) and printed as a one-line ``--replay`` command that
re-runs exactly that scenario. See docs/simulation.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import random
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from weft_serverless.storage.base import Storage
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.storage.sqlite import SQLiteStorage
from weft_serverless.testing.sim_actions import random_actions
from weft_serverless.testing.sim_faults import FAULTS, enabled_faults, random_plan
from weft_serverless.testing.sim_invariants import check
from weft_serverless.testing.sim_records import Scenario
from weft_serverless.testing.sim_world import World

BACKENDS = ("memory", "sqlite", "dynamodb")
NONE_SHARE = 0.2  # share of generated scenarios in ownership mode none
LEASE_SHARE = 0.15  # share in the store-wide lease mode
FAULT_RATE = 0.03  # share of events (writes, activities, invocation ends) hit by a fault
EVENTS_PER_ACTION = {
    "read": 20,
    "write": 8,
    "start": 0.5,
    "shared": 1.0,
    "activity": 1.5,
    "invocation-end": 0.5,
}
MAX_WORKERS = 4
"""A seed draws how many maintenance workers share the shards (1 to this): ``maintain-share``
and the passes at quiescence run worker ``i`` of them."""
HINT_HORIZONS = (0.0, 2.0, 10.0, 60.0, 900.0)
"""A seed draws its engines' hint horizon (0: no hint port, as a deployment without hints);
900 s is SQS's longest delay, the construct's."""
_dynamodb_endpoint: str | None = None


@dataclass
class Outcome:
    """What one scenario did: the violations, and figures for the report."""

    scenario: Scenario
    violations: list[str]
    seconds: float
    writes: int = 0
    faults_fired: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.violations)


def generate(
    seed: int,
    *,
    steps: int = 40,
    engines: int = 3,
    backend: str = "memory",
    faults: Sequence[str] | None = None,
    fault_rate: float = FAULT_RATE,
    weights: Mapping[str, float] | None = None,
    ownership: str | None = None,
) -> Scenario:
    """The scenario a seed stands for (the same seed and options give the same scenario).

    Without ``ownership`` a seed picks it: workflow-lease mostly, then none, then lease.
    """
    rng = random.Random(seed)
    roll = rng.random()
    drawn = "none" if roll < NONE_SHARE else "lease" if roll < NONE_SHARE + LEASE_SHARE else None
    mode = ownership or drawn or "workflow-lease"
    actions = random_actions(rng, steps, engines, weights)
    events = {counter: round(steps * per) for counter, per in EVENTS_PER_ACTION.items()}
    plan = random_plan(rng, enabled_faults(faults), fault_rate, events)  # type: ignore[arg-type]
    workers = rng.randint(1, MAX_WORKERS)
    horizon = rng.choice(HINT_HORIZONS)
    return Scenario(seed, backend, engines, mode, actions, plan, workers, horizon)


@contextmanager
def open_store(backend: str, endpoint: str | None = None) -> Iterator[Storage]:
    """A fresh, empty store on ``backend``; DynamoDB is moto's server over HTTP, at
    ``endpoint`` if given (else one started here)."""
    if backend == "memory":
        yield MemoryStorage()
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            sqlite = SQLiteStorage(os.path.join(folder, "sim.db"))
            try:
                yield sqlite
            finally:
                sqlite.close()
    elif backend == "dynamodb":
        from weft_serverless.storage.dynamodb import DynamoDBStorage

        name = f"sim-{time.monotonic_ns()}"
        storage = DynamoDBStorage(
            name, region="us-east-1", endpoint_url=endpoint or _moto_endpoint()
        )
        storage.create_table()
        try:
            yield storage
        finally:
            storage.client.delete_table(TableName=name)
            storage.close()
    else:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def _moto_endpoint() -> str:
    """moto's DynamoDB server on loopback, started once per process."""
    global _dynamodb_endpoint
    if _dynamodb_endpoint is None:
        from weft_serverless.dev_moto import LockedMotoServer
        from weft_serverless.devserver import FAKE_CREDENTIALS

        for name, value in FAKE_CREDENTIALS.items():
            os.environ.setdefault(name, value)
        _dynamodb_endpoint = LockedMotoServer().start()
    return _dynamodb_endpoint


def run_scenario(scenario: Scenario, endpoint: str | None = None) -> Outcome:
    """Run a scenario to quiescence on a fresh store and check every invariant."""
    began = time.perf_counter()
    with open_store(scenario.backend, endpoint) as store:
        world = World(scenario, store)
        world.run()
        world.quiesce()
        violations = check(world)
    fired = [f"{kind}@{counter}#{n}({engine})" for counter, n, kind, engine in world.fired]
    return Outcome(
        scenario, violations, time.perf_counter() - began, world.counters["write"], fired
    )


# -- shrinking -------------------------------------------------------------------------------


def _kind(violations: list[str]) -> str:
    return violations[0].split("]", 1)[0] + "]" if violations else ""


def shrink(outcome: Outcome, budget_seconds: float = 120.0, endpoint: str | None = None) -> Outcome:
    """Delta-debug the actions and the fault plan while the same invariant still fails."""
    target = _kind(outcome.violations)
    deadline = time.monotonic() + budget_seconds
    best = outcome

    def still_fails(candidate: Scenario) -> Outcome | None:
        if time.monotonic() > deadline:
            return None
        result = run_scenario(candidate, endpoint)
        return result if result.failed and _kind(result.violations) == target else None

    for attr in ("faults", "actions", "faults"):
        items: list[list[Any]] = getattr(best.scenario, attr)
        chunk = max(1, len(items) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            start, reduced = 0, False
            while start < len(items):
                trial = items[:start] + items[start + chunk :]
                candidate = Scenario(**{**asdict(best.scenario), attr: trial})
                result = still_fails(candidate)
                if result is not None:
                    best, items, reduced = result, trial, True
                else:
                    start += chunk
            if not reduced:
                chunk //= 2
    return best


# -- reproduction lines -----------------------------------------------------------------------


def encode_scenario(scenario: Scenario) -> str:
    raw = json.dumps(asdict(scenario), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode()


def decode_scenario(spec: str) -> Scenario:
    raw = zlib.decompress(base64.urlsafe_b64decode(spec.encode()))
    return Scenario(**json.loads(raw))


def reproduction(scenario: Scenario) -> str:
    return f"python -m weft_serverless.testing.simulate --replay '{encode_scenario(scenario)}'"


def describe(outcome: Outcome) -> str:
    """A failure for people: the violations, the fault plan, the actions, one replay line."""
    lines = [f"seed {outcome.scenario.seed} on {outcome.scenario.backend}: FAILED"]
    lines += [f"  {v}" for v in outcome.violations[:12]]
    lines.append(f"  faults fired: {', '.join(outcome.faults_fired) or 'none'}")
    lines.append(f"  {len(outcome.scenario.actions)} action(s):")
    lines += [f"    {json.dumps(action)}" for action in outcome.scenario.actions[:40]]
    lines.append(f"  reproduce: {reproduction(outcome.scenario)}")
    return "\n".join(lines)


CI_SCHEDULES = 1500
"""Schedules a CI run makes (tests/simulation), split between backends by ``CI_SHARES``."""
CI_SHARES = {"memory": 0.877, "sqlite": 0.12, "dynamodb": 0.0027}
CI_STEPS = {"memory": 60, "sqlite": 60, "dynamodb": 20}
CI_FIRST_SEED = {"memory": 0, "sqlite": 100_000, "dynamodb": 200_000}


def ci_seeds(backend: str) -> range:
    """The fixed seed range CI runs on ``backend``."""
    first = CI_FIRST_SEED[backend]
    return range(first, first + max(1, round(CI_SCHEDULES * CI_SHARES[backend])))


def run_seeds(
    seeds: range,
    *,
    shrink_failures: bool = True,
    out: Callable[[str], None] = print,
    time_limit: float | None = None,
    shrink_budget: float = 120.0,
    endpoint: str | None = None,
    first_failure: bool = False,
    clock: Callable[[], float] = time.monotonic,
    **options: Any,
) -> tuple[list[Outcome], int]:
    """Run the seeds (until ``time_limit`` seconds passed on ``clock``, if given; up to the
    first failing one with ``first_failure``); print a shrunk reproduction of each failure;
    return the failures and how many seeds ran."""
    failures = []
    began = clock()
    stop = None if time_limit is None else began + time_limit
    ran = 0
    for seed in seeds:
        if stop is not None and clock() > stop:
            break
        ran += 1
        outcome = run_scenario(generate(seed, **options), endpoint)
        if outcome.failed:
            if first_failure:
                after = clock() - began
                out(f"first failure: seed {seed} on {outcome.scenario.backend} after {after:.1f} s")
            if shrink_failures:
                outcome = shrink(outcome, shrink_budget, endpoint)
            out(describe(outcome))
            failures.append(outcome)
            if first_failure:
                break
    return failures, ran


def _weights(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    pairs = [item.split("=", 1) for item in text.split(",")]
    return {name: float(weight) for name, weight in pairs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m weft_serverless.testing.simulate", description=__doc__
    )
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed")
    parser.add_argument("--steps", type=int, default=40, help="actions per scenario")
    parser.add_argument("--engines", type=int, default=3, help="engines on the one store")
    parser.add_argument("--backend", choices=BACKENDS, default="memory")
    parser.add_argument(
        "--ownership",
        choices=("none", "lease", "workflow-lease"),
        help="ownership mode (default: each seed picks: none, lease or mostly workflow-lease)",
    )
    parser.add_argument(
        "--faults",
        help=f"comma-separated fault kinds (default: every enabled one of {', '.join(FAULTS)})",
    )
    parser.add_argument("--fault-rate", type=float, default=FAULT_RATE)
    parser.add_argument(
        "--actions",
        help="comma-separated action weights overriding the table's, e.g. flood=0.3,crash=1",
    )
    parser.add_argument(
        "--time-limit", type=float, help="stop starting seeds after this many seconds (soak)"
    )
    parser.add_argument("--verbose", action="store_true", help="keep the engine's log output")
    parser.add_argument("--replay", help="run exactly this scenario (printed by a failure)")
    parser.add_argument("--no-shrink", action="store_true", help="print failures unshrunk")
    parser.add_argument(
        "--shrink-budget", type=float, default=120.0, help="seconds to shrink a failure"
    )
    parser.add_argument(
        "--first-failure", action="store_true", help="stop at the first failing seed"
    )
    parser.add_argument(
        "--ci", action="store_true", help="run CI's seed ranges (memory, SQLite, DynamoDB)"
    )
    parser.add_argument(
        "--cpu-time", action="store_true", help="count --time-limit in CPU seconds (with --ci)"
    )
    args = parser.parse_args(argv)
    engine_log = logging.getLogger("weft_serverless")
    level = engine_log.level
    if not args.verbose:
        engine_log.setLevel(logging.CRITICAL)
    try:
        return _run(args)
    finally:
        engine_log.setLevel(level)  # called in-process (tests), it leaves logging as it was


def _run(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    if args.replay:
        outcome = run_scenario(decode_scenario(args.replay))
        print(describe(outcome) if outcome.failed else f"seed {outcome.scenario.seed}: ok")
        return 1 if outcome.failed else 0
    if args.ci:
        return _run_ci(args, began)
    failures, ran = run_seeds(
        range(args.seed, args.seed + args.seeds),
        shrink_failures=not args.no_shrink,
        time_limit=args.time_limit,
        steps=args.steps,
        engines=args.engines,
        backend=args.backend,
        faults=args.faults.split(",") if args.faults else None,
        fault_rate=args.fault_rate,
        weights=_weights(args.actions),
        ownership=args.ownership,
        first_failure=args.first_failure,
        shrink_budget=args.shrink_budget,
    )
    elapsed = time.perf_counter() - began
    print(
        f"{ran} schedule(s) on {args.backend}, {len(failures)} failing, "
        f"{elapsed:.1f} s ({elapsed / max(ran, 1):.2f} s each)"
    )
    return 1 if failures else 0


def _run_ci(args: argparse.Namespace, began: float) -> int:
    """The CI seed ranges, backend by backend, within ``--time-limit`` overall (of CPU time
    with ``--cpu-time``: what one core would take on a machine nothing else uses)."""
    clock = time.process_time if args.cpu_time else time.perf_counter
    start = clock()
    ran = 0
    failures: list[Outcome] = []
    for backend in CI_SHARES:
        left = None if args.time_limit is None else args.time_limit - (clock() - start)
        if left is not None and left <= 0:
            break
        found, count = run_seeds(
            ci_seeds(backend),
            shrink_failures=not args.no_shrink,
            time_limit=left,
            steps=CI_STEPS[backend],
            backend=backend,
            first_failure=args.first_failure,
            shrink_budget=args.shrink_budget,
            clock=clock,
        )
        ran, failures = ran + count, failures + found
        if found and args.first_failure:
            break
    elapsed = time.perf_counter() - began
    print(f"{ran} CI schedule(s), {len(failures)} failing, {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
