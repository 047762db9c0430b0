"""Timer firing throughput of one maintenance invocation, and lateness when timers outrun it.

Part 1, throughput: N runs parked on a sleep all fall due; one ``run_maintenance`` pass (one
EventBridge-invoked maintenance function with the default tick 0) fires them, earliest
first, each driven to its end. Printed per backend and ownership mode: timers fired per
second of wall time, requests per timer, and what one invocation can fire under the pass's
two caps: ``max_timers`` (``MAX_TIMERS_PER_PASS``, 1,000 timers read per pass) and its time
budget (the construct's maintenance timeout, 55 s, less the handler's 5 s margin).

Part 2, lateness: a real engine on ``MemoryStorage`` with a virtual clock; R runs a minute
fall due, evenly spread, for ``--minutes`` minutes, and a pass runs every schedule period
(the construct's default: 1 minute) firing at most C timers, C being what one invocation
fires (part 1's figure for ``--per-pass-backend``, else the 1,000 cap). Each timer's
lateness is read back from the engine's own record (the run's completion time, in virtual
time, minus the due time): pass granularity, not counting the seconds a pass takes to reach
a timer within its batch. Shard count plays no part in throughput: a pass merges every shard
in due order under one cap (see docs/deploy.md, "Timer capacity").

Run: ``python bench/timers.py`` (about 3 minutes; ``--backends``, ``--timers``, ``--rates``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
from weft_serverless import Engine, MemoryStorage, SQLiteStorage, workflow
from weft_serverless.aws.maintenance import DEFAULT_MARGIN
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.engine.runtime import MAX_TIMERS_PER_PASS
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import VirtualClock, moto_dynamodb

SCHEDULE_SECONDS = 60.0  # the construct's default maintenance_rate
TIMEOUT_SECONDS = 55.0  # the construct's default maintenance_timeout
BUDGET_SECONDS = TIMEOUT_SECONDS - DEFAULT_MARGIN
# The virtual clock starts long before moto's real one: the skew warnings it logs are noise.
logging.getLogger("weft_serverless").setLevel(logging.ERROR)
OWNERSHIP = "workflow-lease"  # what the construct deploys; part 2's C is this mode's figure


def nap(ctx, seconds):  # type: ignore[no-untyped-def]
    yield ctx.sleep(seconds)
    return "woke"


NAP = workflow("nap").execute(nap)


def throughput(storage: Storage, parked: int, ownership: str) -> dict[str, float]:
    """Park ``parked`` runs on a 60 s sleep, then time the one pass that fires them."""
    clock = VirtualClock()
    engine = Engine.create(
        storage,
        {"nap": NAP},
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=clock,
        recover=False,
    )
    with engine.invocation():
        for index in range(parked):
            engine.start("nap", 60.0, id=f"nap-{index}")
    clock.advance(120.0)
    storage.stats.reset()
    began = time.perf_counter()
    report = engine.run_maintenance(max_timers=parked)
    elapsed = time.perf_counter() - began
    requests = storage.stats.snapshot()["requests"]
    engine.close()
    assert report.timers_fired == parked, report
    rate = parked / elapsed
    per_invocation = min(MAX_TIMERS_PER_PASS, int(rate * BUDGET_SECONDS))
    return {"rate": rate, "requests": requests / parked, "per_invocation": per_invocation}


def lateness(per_pass: int, rate: int, minutes: int) -> tuple[float, float, int, float]:
    """R = ``rate`` timers due a minute for ``minutes`` minutes, a pass every minute firing at
    most ``per_pass``: (mean lateness s, max lateness s, passes to drain, lateness growth in
    s per minute of overload, from the last minute's timers)."""
    clock = VirtualClock()
    storage = MemoryStorage()
    engine = Engine.create(
        storage, {"nap": NAP}, background_tasks="manual", clock=clock, recover=False
    )
    start = clock()
    total = rate * minutes
    due: dict[str, float] = {}
    for index in range(total):
        delay = 1.0 + SCHEDULE_SECONDS * index / rate  # evenly spread, the first 1 s after start
        workflow_id = f"t-{index}"
        engine.start("nap", delay, id=workflow_id)
        due[workflow_id] = start + delay
    passes = 0
    fired = 0
    while fired < total:
        clock.advance(SCHEDULE_SECONDS)
        report = engine.run_maintenance(max_timers=per_pass)
        fired += report.timers_fired
        passes += 1
    late = {}
    for workflow_id, when in due.items():
        stored = storage.get(keys.state_key(workflow_id))
        assert stored is not None
        state = WorkflowState.from_bytes(stored)
        assert state.status == "completed", state.status
        late[workflow_id] = state.updated_at - when
    engine.close()
    values = list(late.values())
    last = [late[f"t-{index}"] for index in range(total - rate, total)]
    first = [late[f"t-{index}"] for index in range(rate)]
    growth = (statistics.fmean(last) - statistics.fmean(first)) / max(1, minutes - 1)
    return statistics.fmean(values), max(values), passes, growth


def part_one(backends: list[str], parked: int) -> dict[str, float]:
    print(
        f"one pass firing {parked} due timers (each run driven from its sleep to its end);"
        f" one invocation = min({MAX_TIMERS_PER_PASS} timers, {BUDGET_SECONDS:.0f} s budget"
        " x rate)"
    )
    print(
        f"{'backend':<14}{'ownership':<16}{'timers/s':>10}{'req/timer':>11}{'per invocation':>16}"
    )
    rates: dict[str, float] = {}
    makers: list[tuple[str, Callable[[str], Storage]]] = []
    if "memory" in backends:
        makers.append(("memory", lambda _: MemoryStorage()))
    if "sqlite" in backends:
        folder = Path(os.environ.get("TMPDIR", "/tmp"))

        def sqlite(name: str) -> Storage:
            path = folder / f"weft-timers-{os.getpid()}-{name}.db"
            path.unlink(missing_ok=True)
            return SQLiteStorage(path)

        makers.append(("sqlite", sqlite))
    for backend, make in makers:
        for ownership in ("none", "workflow-lease"):
            row = throughput(make(ownership), parked, ownership)
            if ownership == OWNERSHIP:
                rates[backend] = row["per_invocation"]
            _row(backend, ownership, row)
    if "dynamodb" in backends:
        count = min(parked, 200)  # moto in-process parks and fires a few dozen runs a second
        with moto_dynamodb() as moto:
            for ownership in ("none", "workflow-lease"):
                storage = moto.storage(f"weft-timers-{ownership}")
                row = throughput(storage, count, ownership)
                if ownership == OWNERSHIP:
                    rates["dynamodb"] = row["per_invocation"]
                _row(f"dynamodb*{count}", ownership, row)
                moto.client.delete_table(TableName=storage.table_name)
        print("  * moto in-process, serialised by a lock: one request at a time, a few ms each")
    return rates


def _row(backend: str, ownership: str, row: dict[str, float]) -> None:
    print(
        f"{backend:<14}{ownership:<16}{row['rate']:>10.0f}{row['requests']:>11.1f}"
        f"{int(row['per_invocation']):>16}",
        flush=True,
    )


def part_two(per_pass: int, label: str, rates: list[int], minutes: int) -> None:
    print()
    print(
        f"lateness: a pass every {SCHEDULE_SECONDS:.0f} s firing at most {per_pass} timers"
        f" ({label}), {keys.TIMER_SHARDS} timer shards, R due a minute for {minutes} min"
    )
    print(f"{'R due/min':>10}{'mean s':>10}{'max s':>10}{'passes':>8}{'growth s/min':>14}")
    for rate in rates:
        mean, worst, passes, growth = lateness(per_pass, rate, minutes)
        print(f"{rate:>10}{mean:>10.1f}{worst:>10.1f}{passes:>8}{growth:>14.1f}", flush=True)
    print(
        "  lateness is counted at pass granularity (virtual time); within a pass a timer also"
        " waits for the ones fired before it (at most C / timers-per-second)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="memory,sqlite,dynamodb")
    parser.add_argument("--timers", type=int, default=1000, help="due timers fired in part 1")
    parser.add_argument("--rates", default="500,900,1000,1100,1500,2000")
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument(
        "--per-pass-backend",
        default="",
        help="use what one invocation fires on this backend (part 1) as C; default: the cap",
    )
    args = parser.parse_args()
    per_invocation = part_one(args.backends.split(","), args.timers)
    chosen = args.per_pass_backend
    per_pass = int(per_invocation[chosen]) if chosen else MAX_TIMERS_PER_PASS
    label = f"one invocation on {chosen}" if chosen else "MAX_TIMERS_PER_PASS"
    rates = [int(rate) for rate in args.rates.split(",")]
    part_two(per_pass, label, rates, args.minutes)


if __name__ == "__main__":
    main()
