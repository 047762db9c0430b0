"""What an update costs as updates pile up at one park point.

Prints one table; asserts nothing (figures depend on the machine). Run from the repository
root::

    python bench/updates.py                 # N = 100, 1,000, 2,000 on MemoryStorage
    python bench/updates.py --counts 100 500 --tail 20

A workflow parks on a signal wait and registers an ``add`` update handler that appends to a
list. N updates are sent one after another to that one park point, through a manual engine on
``MemoryStorage`` (no disk, so the figures are the engine's own work). For each N it prints
the mean wall time per update over all N, the mean over the last ``--tail`` updates (the
marginal cost at that depth) in wall and in CPU time (``process_time``, steadier on a busy
machine), and the storage requests, items read and items written per
update over that tail, from ``storage.stats``. Every update reads the workflow's partition in
one range read, so items read per update necessarily grow with N (one record per earlier
update); the time per update should not.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Generator
from typing import Any

from weft_serverless import Engine, MemoryStorage, WorkflowContext, workflow

COUNTS = (100, 1000, 2000)


def collecting(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, int]:
    items: list[int] = []

    def add(item: int) -> int:
        items.append(item)
        return len(items)

    ctx.on_update("add", add)
    ctx.on_query("count", lambda _: len(items))
    yield ctx.wait_for_signal("done")
    return len(items)


WORKFLOWS = {"collecting": workflow("collecting").execute(collecting)}


def measure(count: int, tail: int) -> dict[str, float]:
    """Send ``count`` updates to one parked run; mean cost overall and over the last ``tail``."""
    storage = MemoryStorage()
    engine = Engine.create(storage, WORKFLOWS, background_tasks="manual")
    engine.start("collecting", id="bench")
    tail = min(tail, count)
    began = time.perf_counter()
    for index in range(count - tail):
        engine.update("bench", "add", index)
    tail_began, tail_cpu = time.perf_counter(), time.process_time()
    storage.stats.reset()
    for index in range(count - tail, count):
        if engine.update("bench", "add", index) != index + 1:
            raise RuntimeError("an update returned the wrong count")
    ended, ended_cpu = time.perf_counter(), time.process_time()
    stats = storage.stats.snapshot()
    if engine.query("bench", "count") != count:
        raise RuntimeError("the query does not see every update")
    engine.close()
    return {
        "mean_ms": (ended - began) / count * 1e3,
        "tail_ms": (ended - tail_began) / tail * 1e3,
        "tail_cpu_ms": (ended_cpu - tail_cpu) / tail * 1e3,
        "requests": stats["requests"] / tail,
        "items_read": stats["scanned_items"] / tail,
        "items_written": stats["items_written"] / tail,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--counts", type=int, nargs="+", default=list(COUNTS))
    parser.add_argument("--tail", type=int, default=50, help="updates in the marginal figure")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    print(
        f"weft bench/updates.py: Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, MemoryStorage"
    )
    print(f"\nN updates at one park point; tail = the last {args.tail} updates")
    print(
        f"{'N':>6} {'ms/update':>10} {'tail ms/update':>15} {'tail CPU ms':>12} {'requests':>9} "
        f"{'items read':>11} {'items written':>14}"
    )
    for count in args.counts:
        row = measure(count, args.tail)
        print(
            f"{count:>6} {row['mean_ms']:>10.3f} {row['tail_ms']:>15.3f} "
            f"{row['tail_cpu_ms']:>12.3f} {row['requests']:>9.1f} {row['items_read']:>11.1f} "
            f"{row['items_written']:>14.1f}"
        )
    print("\nrequests, items read and written are per update over the tail (storage.stats)")
    print(f"total {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
