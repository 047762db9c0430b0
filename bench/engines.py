"""N engines driving one set of runs on one DynamoDB table under ``workflow-lease``.

For N = 1, 2, 4, 8: a fresh table on moto's HTTP server (loopback, ``LockedMotoServer``),
``--runs`` runs started and parked on a 1 s sleep, then N threads, each its own ``Engine``
and its own boto3 client, run maintenance passes as a Lambda would (one pass per
``engine.invocation()``, whose end releases the claims of parked runs) until every run has
ended. Each run is ``--steps`` activities with a 1 s sleep half way, so every run is woken
twice by a timer that all N engines read: they race to claim it, and the one that wins
drives it. Prints steps per second (wall), claim conflicts and takeovers per 1,000 steps,
requests per step, then checks every run's history: each step's op record exactly once, in
order, with the right result, and how many times each activity ran (more than once is
allowed only after a takeover: at-least-once; it is printed).

Conflicts are counted from the engines' own counters: claims lost to a racing engine
(``claim_attempts.lost_race``), conditional writes refused by the store
(``storage.stats.conditional_failures``, which include those lost claims) and due timers
left for another pass because their run was held elsewhere (``timers_retained``).
Takeovers are ``claim_attempts.takeover`` (a claim taken from an expired holder) and
``claim_attempts.deposed`` (an engine finding it lost one).

moto is slow and serialises every request behind one lock (it is not atomic otherwise), so
more engines cannot make it faster: the curve shows the contention cost, not DynamoDB's
scaling. Run: ``python bench/engines.py`` (a few minutes; ``--engines``, ``--runs``;
``--claim-ttl 1`` makes claims lapse under load, so that takeovers happen).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    os.environ.setdefault(_name, "testing")

from weft_serverless import Engine, WorkflowContext, workflow  # noqa: E402
from weft_serverless.codec import decode  # noqa: E402
from weft_serverless.dev_moto import LockedMotoServer  # noqa: E402
from weft_serverless.engine.persistence.records import WorkflowState  # noqa: E402
from weft_serverless.storage import keys  # noqa: E402
from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table  # noqa: E402
from weft_serverless.testing_moto import serialise_moto  # noqa: E402

logging.getLogger("weft_serverless").setLevel(logging.ERROR)  # claim-lost warnings are counted
warnings.simplefilter("ignore")

IDLE_PAUSE = 0.2
"""Seconds an engine waits after a pass that fired nothing: each engine's idle passes cost
8 requests, and moto serves one request at a time, so polling faster only starves the
passes that have work."""
CALLS: Counter[tuple[str, int]] = Counter()
CALLS_LOCK = threading.Lock()


def work(call: dict[str, Any]) -> int:
    with CALLS_LOCK:
        CALLS[(call["run"], call["index"])] += 1
    return int(call["index"]) ** 2


def stepped(ctx: WorkflowContext, spec: dict[str, Any]) -> Generator[Any, Any, int]:
    total = 0
    for index in range(spec["steps"]):
        if index == spec["steps"] // 2:
            yield ctx.sleep("1s")
        total += yield ctx.run("work", {"run": spec["run"], "index": index})
    return total


def napping(ctx: WorkflowContext, spec: dict[str, Any]) -> Generator[Any, Any, int]:
    """Parks at once, so that the engines under test drive every step."""
    yield ctx.sleep("1s")
    return (yield from stepped(ctx, spec))


FLOWS = {"napping": workflow("napping").activities(work=work).execute(napping)}


def client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=2,
        read_timeout=30,
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=8,
    )
    return boto3.session.Session().client(
        "dynamodb", region_name="us-east-1", endpoint_url=endpoint, config=config
    )


def measure(
    endpoint: str, engines: int, runs: int, steps: int, timeout: float, claim_ttl: float
) -> dict[str, Any]:
    table = f"bench-{uuid.uuid4().hex[:8]}"
    setup = client(endpoint)
    create_table(setup, table)
    starter = Engine.create(
        DynamoDBStorage(table, client=setup),
        FLOWS,
        ownership="workflow-lease",
        background_tasks="manual",
        recover=False,
    )
    ids = [f"run-{index:03d}" for index in range(runs)]
    with starter.invocation(time_left=lambda: 60.0):
        for run in ids:
            starter.start("napping", {"steps": steps, "run": run}, id=run)
    starter.close()
    CALLS.clear()
    storages = [DynamoDBStorage(table, client=client(endpoint)) for _ in range(engines)]
    fleet = [
        Engine.create(
            storage,
            FLOWS,
            ownership="workflow-lease",
            background_tasks="manual",
            recover=False,
            engine_id=f"engine-{index}",
            workflow_claim_ttl=claim_ttl,
            workflow_claim_renew_interval=claim_ttl / 6,
        )
        for index, storage in enumerate(storages)
    ]
    for storage in storages:
        storage.stats.reset()
    stop = threading.Event()
    results: list[dict[str, int]] = [{} for _ in fleet]
    shared = [0]  # runs completed, summed over the engines' own counters
    threads = []
    began = time.perf_counter()
    for index, engine in enumerate(fleet):

        def body(engine: Engine = engine, index: int = index) -> None:
            local = [0]
            retained = 0
            while not stop.is_set():
                with engine.invocation(time_left=lambda: 60.0, step_reserve=0.0):
                    report = engine.run_maintenance()
                retained += report.parts.get("timers_retained", 0)
                done = engine.runtime.metrics.workflows_completed
                with CALLS_LOCK:
                    shared[0] += done - local[0]
                    local[0] = done
                    if shared[0] >= runs:
                        stop.set()
                if not report.timers_fired:
                    time.sleep(IDLE_PAUSE)
            results[index] = {"timers_retained": retained}

        thread = threading.Thread(target=body, name=f"engine-{index}")
        threads.append(thread)
        thread.start()
    stop.wait(timeout)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    counters: Counter[str] = Counter()
    for engine, storage, result in zip(fleet, storages, results, strict=True):
        metrics = engine.runtime.metrics
        counters["steps"] += metrics.steps_committed
        counters.update(metrics.counters)
        counters["conditional_failures"] += storage.stats.conditional_failures
        counters["requests"] += storage.stats.requests()
        counters["timers_retained"] += result.get("timers_retained", 0)
        engine.close()
    check = verify(DynamoDBStorage(table, client=setup), ids, steps)
    setup.delete_table(TableName=table)
    return {"elapsed": elapsed, "counters": counters, "check": check}


def expected_history(steps: int) -> list[str]:
    """The signatures of a run's op records, in slot order."""
    works = ["run:work"] * steps
    return ["sleep", *works[: steps // 2], "sleep", *works[steps // 2 :]]


def verify(storage: DynamoDBStorage, ids: list[str], steps: int) -> dict[str, int]:
    """Every run completed with the right result; its op records are exactly the expected
    ones (slots 0.. in order, each step once, each activity's stored result right); and how
    many times each activity ran."""
    expected = expected_history(steps)
    unfinished = lost = extra = wrong = 0
    for run in ids:
        stored = storage.get(keys.state_key(run))
        state = None if stored is None else WorkflowState.from_bytes(stored)
        if state is None or state.status != "completed" or state.result is None:
            unfinished += 1
            continue
        wrong += decode(state.result) != sum(index * index for index in range(steps))
        ops = [
            (int(sort[len(keys.OP_PREFIX) :]), decode(value))
            for sort, value in storage.scan(keys.workflow_partition(run), keys.OP_PREFIX)
            if "." not in sort[len(keys.OP_PREFIX) :]
        ]
        slots = [slot for slot, _ in ops]
        lost += len(set(range(len(expected))) - set(slots))
        extra += len([slot for slot in slots if slot >= len(expected)])
        if [op["sig"] for _, op in ops] != expected[: len(ops)]:
            wrong += 1
        values = [decode(op["v"]) for _, op in ops if op["sig"] == "run:work"]
        wrong += values != [index * index for index in range(len(values))]
    calls = Counter(CALLS.values())
    return {
        "unfinished": unfinished,
        "steps lost": lost,
        "steps doubled": extra,
        "wrong": wrong,
        "activities run once": calls.get(1, 0),
        "more than once": sum(count for times, count in calls.items() if times > 1),
        "never": len(ids) * steps - len(CALLS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="1,2,4,8")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per N at most")
    parser.add_argument(
        "--claim-ttl",
        type=float,
        default=30.0,
        help="workflow claim TTL (renewed every TTL/6): a short one makes takeovers happen",
    )
    args = parser.parse_args()
    # moto's fixes for speed (no whole-table copy per transaction, a Query reads one
    # partition) and its one lock, as the tests run it.
    server = LockedMotoServer(lock=serialise_moto())
    endpoint = server.start()
    print(
        f"{args.runs} runs x {args.steps} activity steps (+ 2 sleeps), ownership workflow-lease"
        f" (claim TTL {args.claim_ttl:g} s), moto's HTTP server on loopback (one request at a"
        " time)"
    )
    print(
        f"{'N':>3}{'steps/s':>9}{'req/s':>7}{'req/step':>10}{'conflicts/1k':>14}"
        f"{'lost race/1k':>14}"
        f"{'retained/1k':>13}{'takeovers/1k':>14}   history check"
    )
    try:
        for count in (int(n) for n in args.engines.split(",")):
            row = measure(endpoint, count, args.runs, args.steps, args.timeout, args.claim_ttl)
            counters, check = row["counters"], row["check"]
            steps = max(1, counters["steps"])

            def per_k(name: str, counters: Counter[str] = counters, steps: int = steps) -> str:
                return f"{counters[name] * 1000 / steps:.1f}"

            takeovers = counters["claim_attempts.takeover"] + counters["claim_attempts.deposed"]
            print(
                f"{count:>3}{counters['steps'] / row['elapsed']:>9.1f}"
                f"{counters['requests'] / row['elapsed']:>7.0f}"
                f"{counters['requests'] / steps:>10.1f}{per_k('conditional_failures'):>14}"
                f"{per_k('claim_attempts.lost_race'):>14}{per_k('timers_retained'):>13}"
                f"{takeovers * 1000 / steps:>14.1f}   "
                + ", ".join(f"{key} {value}" for key, value in check.items()),
                flush=True,
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
