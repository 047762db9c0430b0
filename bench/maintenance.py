"""Maintenance cost against the number of parked workflows.

Parks N workflows on a one-hour sleep, then measures one ``run_maintenance`` pass with
nothing due (the steady state of an EventBridge tick) and one pass in which every timer falls
due. An idle pass should cost the same whatever N is: timers are read only up to ``now``,
shard by shard. Prints storage requests and items read per pass, wall time, on DynamoDB
(moto, in-process) the request units, and the claims lost on the way (the parking happens in
one ``engine.invocation()``, whose heartbeat renews claims on its own thread meanwhile; it
should print 0). Run: ``python bench/maintenance.py`` (``--sizes``, ``--backends``).

The idle pass must cost at most ``TIMER_SHARDS + 5`` requests at every N (ADR 0039). N =
100,000 runs on memory only (``--moto-max``: parking that many on moto would take hours):
``storage.stats`` counts one request per read or write call, and the DynamoDB adapter sends
one ``Query`` per call too as long as the answer fits one 1 MB page, which every read of an
idle pass does (a one-item probe per timer shard, and the claims index, which holds no
parked run once its invocation released it). The moto rows show both counts agreeing.

Then schedules: an idle pass with S schedules none of which is due (their next fires are
timers due tomorrow) must cost what it costs with none, and one fire's cost is printed apart:
the requests of a pass in which one schedule is due, minus an idle pass's (``--schedules``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from weft_serverless import Engine, MemoryStorage, workflow
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import VirtualClock, moto_dynamodb


def nap(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.sleep("1h")
    return "woke"


DEFINITION = workflow("nap").execute(nap)
IDLE_BOUND = keys.TIMER_SHARDS + 5


def measure(storage: Storage, parked: int, ownership: str) -> tuple[str, str]:
    clock = VirtualClock()
    engine = Engine.create(
        storage,
        {"nap": DEFINITION},
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=clock,
        recover=False,
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", WorkflowClaimLost)
        with engine.invocation():
            for index in range(parked):
                engine.start("nap", id=f"nap-{index}")
    lost = sum(1 for w in seen if issubclass(w.category, WorkflowClaimLost))
    meter = getattr(storage, "meter", None)
    cells = []
    for advance in (60.0, 3600.0):
        clock.advance(advance)
        storage.stats.reset()
        units = meter.snapshot() if meter is not None else None
        began = time.perf_counter()
        report = engine.run_maintenance()
        elapsed = (time.perf_counter() - began) * 1000
        stats = storage.stats.snapshot()
        cell = f"{stats['requests']:>5} req {stats['scanned_items']:>6} items {elapsed:>8.1f} ms"
        if meter is not None and units is not None:
            used = meter.snapshot() - units
            cell += f" {used.read_units:>5} RRU {used.write_units:>5} WRU"
            cell += f" {used.requests:>5} sent"
        if advance == 60.0:
            verdict = "within" if stats["requests"] <= IDLE_BOUND else "OVER"
            cell += f" [{verdict} shards+5 = {IDLE_BOUND}]"
        cells.append(f"{cell} ({report.timers_fired} fired)")
    cells[0] += f"  claims lost while parking: {lost}"
    engine.close()
    return cells[0], cells[1]


def measure_schedules(storage: Storage, count: int, ownership: str) -> str:
    """Idle pass with ``count`` schedules, none due; then the extra cost of one fire."""
    clock = VirtualClock()
    engine = Engine.create(
        storage,
        {"nap": DEFINITION, "noop": NOOP},
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=clock,
        recover=False,
    )
    for index in range(count):
        engine.schedule(f"sched-{index:05d}", "noop", every="1d", start_at=clock() + 86400)
    clock.advance(60.0)
    storage.stats.reset()
    engine.run_maintenance()
    idle = storage.stats.snapshot()
    engine.schedule("due-now", "noop", every="1h")
    clock.advance(3600.0)
    storage.stats.reset()
    meter = getattr(storage, "meter", None)
    units = meter.snapshot() if meter is not None else None
    report = engine.run_maintenance()
    fire = storage.stats.snapshot()
    assert report.timers_fired == 1, report
    engine.close()
    line = (
        f"idle pass {idle['requests']:>3} req {idle['scanned_items']:>3} items;"
        f" a pass firing one schedule {fire['requests']:>3} req"
        f" (+{fire['requests'] - idle['requests']} over idle: the fire, and the run it starts"
        " and drives to its end)"
    )
    if meter is not None and units is not None:
        used = meter.snapshot() - units
        line += f" {used.read_units} RRU {used.write_units} WRU"
    return line


def noop(ctx, _):  # type: ignore[no-untyped-def]
    return "done"
    yield


NOOP = workflow("noop").execute(noop)


def schedules(backends: list[str], counts: list[int]) -> None:
    print("one maintenance pass, S schedules none of which is due")
    print(f"{'backend':<10}{'ownership':<16}{'S':>6}   cost")
    for count in counts if "memory" in backends else ():
        for ownership in ("none", "workflow-lease"):
            line = measure_schedules(MemoryStorage(), count, ownership)
            print(f"{'memory':<10}{ownership:<16}{count:>6}   {line}", flush=True)
    if "dynamodb" not in backends:
        return
    with moto_dynamodb() as moto:
        for count in counts:
            for ownership in ("none", "workflow-lease"):
                storage = moto.storage(f"weft-sched-{count}-{ownership}")
                line = measure_schedules(storage, count, ownership)
                print(f"{'dynamodb':<10}{ownership:<16}{count:>6}   {line}", flush=True)
                moto.client.delete_table(TableName=storage.table_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,100000", help="comma-separated N values")
    parser.add_argument(
        "--moto-max", type=int, default=1000, help="largest N also run on moto (slow)"
    )
    parser.add_argument("--backends", default="memory,dynamodb", help="memory and/or dynamodb")
    parser.add_argument("--schedules", default="0,10000", help="comma-separated S values")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    backends = args.backends.split(",")
    schedules(backends, [int(count) for count in args.schedules.split(",")])
    print("one maintenance pass, N workflows parked on a 1 h sleep")
    print(
        "memory: requests counted by storage.stats, one per read or write call; the DynamoDB"
        " adapter sends one Query per call while the answer fits one 1 MB page, as every"
        " idle-pass read does, so the memory figures are DynamoDB's request counts"
    )
    print(f"{'backend':<10}{'ownership':<16}{'N':>6}   idle pass / pass where all N fall due")
    for parked in sizes if "memory" in backends else ():
        for ownership in ("none", "workflow-lease"):
            idle, due = measure(MemoryStorage(), parked, ownership)
            print(f"{'memory':<10}{ownership:<16}{parked:>6}   {idle}")
            print(f"{'':<32}   {due}")
    if "dynamodb" not in backends:
        return
    # In-process moto, serialised: the invocation heartbeat renews claims on its own thread.
    print(
        f"N above {args.moto_max} skipped on moto (it parks a few dozen runs a second);"
        " DynamoDB requests sent are counted by the adapter's meter ('sent')"
    )
    with moto_dynamodb() as moto:
        for parked in (size for size in sizes if size <= args.moto_max):
            for ownership in ("none", "workflow-lease"):
                storage = moto.storage(f"weft-maint-{parked}-{ownership}")
                idle, due = measure(storage, parked, ownership)
                print(f"{'dynamodb':<10}{ownership:<16}{parked:>6}   {idle}", flush=True)
                print(f"{'':<32}   {due}", flush=True)
                moto.client.delete_table(TableName=storage.table_name)


if __name__ == "__main__":
    main()
