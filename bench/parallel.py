"""Fan-out: ``all`` of 20 activities that each take 100 ms of real time.

Prints the wall time of one run (start to result, manual mode, memory and SQLite stores)
with the branches running together (the default ``max_parallel_activities``), with
``ctx.map(..., max_concurrency=5)``, as four nested ``all`` of five (one fan-out: near
100 ms, as flat), and one after another (``max_parallel_activities=0``, the behaviour before
branches ran together). Together should be near 100 ms, one after another near 2 s.
Run: ``python bench/parallel.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Any

from weft_serverless import Engine, MemoryStorage, SQLiteStorage, workflow

BRANCHES = 20
ACTIVITY_SECONDS = 0.1


def fetch(item: int) -> int:
    time.sleep(ACTIVITY_SECONDS)  # stands for I/O: an HTTP call, a query
    return item


def fan_out(ctx: Any, n: int) -> Any:
    return (yield ctx.all(*(ctx.run("fetch", i) for i in range(n))))


def mapped(ctx: Any, n: int) -> Any:
    return (yield ctx.map("fetch", range(n), max_concurrency=5))


def nested(ctx: Any, n: int) -> Any:
    quarters = [ctx.all(*(ctx.run("fetch", i) for i in range(q, n, 4))) for q in range(4)]
    parts = yield ctx.all(*quarters)
    return sorted(value for part in parts for value in part)


FLOWS = {
    "fan": workflow("fan").activities(fetch=fetch).execute(fan_out),
    "map": workflow("map").activities(fetch=fetch).execute(mapped),
    "nested": workflow("nested").activities(fetch=fetch).execute(nested),
}


def timed(storage: Any, flow: str, parallel: int, run: int) -> float:
    engine = Engine.create(
        storage, FLOWS, background_tasks="manual", max_parallel_activities=parallel
    )
    began = time.perf_counter()
    result = engine.start(flow, BRANCHES, id=f"{flow}-{parallel}-{run}").result()
    elapsed = time.perf_counter() - began
    assert result == list(range(BRANCHES))
    engine.close()
    return elapsed


def main() -> None:
    each = f"{ACTIVITY_SECONDS * 1000:.0f} ms"
    print(f"all/map of {BRANCHES} activities x {each} (wall ms, best of 3)")
    with tempfile.TemporaryDirectory() as folder:
        stores = {
            "memory": MemoryStorage(),
            "sqlite": SQLiteStorage(str(Path(folder) / "bench.db")),
        }
        for name, storage in stores.items():
            for label, flow, parallel in (
                ("all, together (default bound 32)", "fan", 32),
                ("all, together (bound 8)", "fan", 8),
                ("map, max_concurrency=5", "map", 32),
                ("4 nested alls of 5, together", "nested", 32),
                ("all, one after another (0)", "fan", 0),
            ):
                best = min(timed(storage, flow, parallel, run) for run in range(3))
                print(f"  {name:7s} {label:34s} {best * 1000:8.1f}")


if __name__ == "__main__":
    main()
