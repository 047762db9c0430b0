"""Engine overhead per step, and what resuming costs as a workflow's history grows.

Prints two tables; asserts nothing (figures depend on the machine and, for SQLite, the disk:
every step commit is one fsync). Run from the repository root::

    python bench/steps.py            # memory at 100, 1,000, 10,000 steps; SQLite at 1,000
    python bench/steps.py --lengths 100,2000 --steps 200 --runs 5

1. A sequential workflow of N trivial activities, driven inline by a manual engine on
   ``MemoryStorage``, for each N of ``--lengths``: wall microseconds per step, steps per
   second, and storage requests per step from ``storage.stats``. The engine's work per step
   does not depend on N (tests/engine/test_step_cost.py holds it to that), so neither
   should the time.
2. The same for ``--steps`` steps on ``SQLiteStorage`` (a temporary file), against a raw
   SQLite commit of the same bytes in the same run: a table shaped like the store's, WAL,
   ``synchronous=FULL``, one ``INSERT`` per transaction of an op record the engine wrote
   (``BEGIN``, ``INSERT``, ``COMMIT``; ``--raw-autocommit``: the ``INSERT`` alone as its own
   transaction, which is how the store commits a bare step).
   Engine commits and raw commits alternate one by one (each step's activity makes one raw
   commit into a second file, timed apart), so both see the same disk; the ratio is of the
   medians over ``--runs`` runs. Every commit is one fsync either way: the ratio, and the
   microseconds a step takes over a raw commit, are what the engine adds to it.
3. A SQLite step under each ownership mode (``none``, ``lease``, ``workflow-lease``):
   wall and CPU microseconds per step and their ratio to ``none``, and commits per step
   (each one fsync). Under ``workflow-lease`` a step commits on the run's head, its previous
   step's write-out in the same batch (ADR 0051): one commit, as under ``none``. CPU time is
   the figure to compare on a loaded machine. ``--modes-only`` prints this section alone.
4. Resume cost: a workflow parks on a signal after N steps; a fresh engine on the same store
   (a new SQLite connection, as a restarted process would open) recovers it, then receives
   the signal and finishes. Both replay all N steps from the op log, so time and items read
   grow with N, while requests stay flat (one range read of the workflow's partition).
5. Resume after ``continue_as_new``: the same, for a run parked after N steps in the last of
   R runs chained by ``continue_as_new`` (R x N steps in all). Items read follow N, not R x N:
   earlier runs' records are deleted by the drive after each continue.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from weft_serverless import Engine, MemoryStorage, SQLiteStorage, WorkflowContext, workflow
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage

HISTORY_LENGTHS = (10, 100, 1000)
Mode = Literal["none", "lease", "workflow-lease"]
MODES: tuple[Mode, ...] = ("none", "lease", "workflow-lease")
RUN_LENGTHS = "100,1000,10000"
# The store's table (storage/sqlite.py), for the raw commits measured beside it.
RAW_SCHEMA = (
    "CREATE TABLE kv (partition TEXT NOT NULL, sort TEXT NOT NULL, value BLOB NOT NULL, "
    "PRIMARY KEY (partition, sort)) WITHOUT ROWID"
)
Row = tuple[str, str, bytes]
Opener = Callable[[], Storage]


def noop(value: int) -> int:
    return value


def sequential(ctx: WorkflowContext, steps: int) -> Generator[Any, Any, int]:
    for index in range(steps):
        yield ctx.run(noop, index)
    return steps


def parked(ctx: WorkflowContext, steps: int) -> Generator[Any, Any, int]:
    for index in range(steps):
        yield ctx.run(noop, index)
    yield ctx.wait_for_signal("go")
    return steps


def chained(ctx: WorkflowContext, chain: dict[str, int]) -> Generator[Any, Any, int]:
    for index in range(chain["steps"]):
        yield ctx.run(noop, index)
    if chain["run"] + 1 < chain["runs"]:
        yield ctx.continue_as_new({**chain, "run": chain["run"] + 1})
    yield ctx.wait_for_signal("go")
    return chain["steps"]


class RawCommits:
    """A raw SQLite file beside the store, written by the paired workflow's activity: one
    commit of a stored op record between two engine steps, timed on its own."""

    def __init__(self, path: Path, rows: list[Row], *, autocommit: bool = False) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.autocommit = autocommit  # the INSERT alone, its own transaction
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(RAW_SCHEMA)
        self.rows = rows
        self.raw: list[float] = []  # each raw commit's time
        self.engine: list[float] = []  # from one raw commit's end to the next one's start
        self.ended: float | None = None

    def commit(self, index: int) -> int:
        row = self.rows[index % len(self.rows)]
        began = time.perf_counter()
        if self.ended is not None:
            self.engine.append(began - self.ended)  # the engine's step, its commit included
        if not self.autocommit:
            self.conn.execute("BEGIN")
        self.conn.execute(
            "INSERT INTO kv (partition, sort, value) VALUES (?, ?, ?)",
            (row[0], f"{row[1]}#{index}", row[2]),
        )
        if not self.autocommit:
            self.conn.execute("COMMIT")
        self.ended = time.perf_counter()
        self.raw.append(self.ended - began)
        return index


RAW: list[RawCommits] = []  # the paired run's raw file (one at a time)


def raw_commit(index: int) -> int:
    return RAW[-1].commit(index)


def paired(ctx: WorkflowContext, steps: int) -> Generator[Any, Any, int]:
    for index in range(steps):
        yield ctx.run(raw_commit, index)
    return steps


WORKFLOWS = {
    "paired": workflow("paired").activities(raw_commit=raw_commit).execute(paired),
    "sequential": workflow("sequential").activities(noop=noop).execute(sequential),
    "parked": workflow("parked").activities(noop=noop).execute(parked),
    "chained": workflow("chained").activities(noop=noop).execute(chained),
}
CHAIN_STEPS = 100
CHAIN_RUNS = (1, 10)


@contextmanager
def store(backend: str) -> Iterator[Opener]:
    """An empty store; the opener returns a new handle on it each call, like a new process."""
    if backend == "memory":
        memory = MemoryStorage()
        yield lambda: memory
        return
    with tempfile.TemporaryDirectory(prefix="weft-bench-") as folder:
        path = Path(folder) / "bench.db"
        opened: list[Storage] = []

        def open_sqlite() -> Storage:
            opened.append(SQLiteStorage(path))
            return opened[-1]

        try:
            yield open_sqlite
        finally:
            for handle in opened:
                handle.close()


def engine_on(storage: Storage, *, recover: bool = False, ownership: Mode = "none") -> Engine:
    return Engine.create(
        storage, WORKFLOWS, background_tasks="manual", recover=recover, ownership=ownership
    )


def per_step(backend: str, steps: int, runs: int) -> dict[str, float]:
    """Median wall time of driving ``steps`` activities inline, and requests per step."""
    times: list[float] = []
    counters: dict[str, int] = {}
    for _ in range(runs):
        with store(backend) as open_store:
            elapsed, counters, _rows = one_run(open_store(), steps)
            times.append(elapsed)
    figures = _figures(statistics.median(times), steps, counters)
    figures["best_us"] = min(times) / steps * 1e6  # the run least disturbed by other work
    return figures


def one_run(
    storage: Storage, steps: int, ownership: Mode = "none"
) -> tuple[float, dict[str, int], list[Row]]:
    """Drive one sequential run: its wall time, the store's counters, and the op records
    it wrote (what a raw commit of the same bytes inserts)."""
    engine = engine_on(storage, ownership=ownership)
    storage.stats.reset()
    began = time.perf_counter()
    handle = engine.start("sequential", steps, id="bench")
    elapsed = time.perf_counter() - began
    counters = storage.stats.snapshot()
    if handle.result() != steps:
        raise RuntimeError("the benchmark workflow did not complete")
    partition = keys.workflow_partition("bench")
    rows = [(partition, sort, value) for sort, value in storage.scan(partition, keys.OP_PREFIX)]
    return elapsed, counters, rows


def _figures(wall: float, steps: int, counters: dict[str, int]) -> dict[str, float]:
    writes = counters["batches"] + counters["conditional_batches"]
    return {
        "us_per_step": wall / steps * 1e6,
        "steps_per_s": steps / wall,
        "writes": writes / steps,
        "items": counters["items_written"] / steps,
        "requests": counters["requests"] / steps,
    }


def sqlite_by_mode(steps: int, runs: int, ownership: Mode) -> dict[str, float]:
    """Per step on SQLite under an ownership mode: the median wall and CPU time of driving
    ``steps`` activities inline, and writes (commits, each one fsync) per step. CPU time is
    the figure to compare on a loaded machine; wall time holds the fsyncs."""
    walls: list[float] = []
    cpus: list[float] = []
    counters: dict[str, int] = {}
    for _ in range(runs):
        with store("sqlite") as open_store:
            cpu = time.process_time()
            elapsed, counters, _rows = one_run(open_store(), steps, ownership)
            cpus.append(time.process_time() - cpu)
            walls.append(elapsed)
    figures = _figures(statistics.median(walls), steps, counters)
    figures["cpu_us"] = statistics.median(cpus) / steps * 1e6
    return figures


def sqlite_against_raw(steps: int, runs: int, *, autocommit: bool = False) -> dict[str, float]:
    """Engine steps on SQLite against raw commits of the same bytes, commit by commit.

    A sequential run first gives the op records the engine stores. Then a run of ``steps``
    steps whose activity makes one raw commit of such a record into a second file: engine
    commits and raw commits alternate on the same disk, so both see the same fsync times.
    An engine step is the time from one raw commit's end to the next one's start (the
    step's commit, the engine's work, the next step's start). Medians, not means: a shared
    disk's rare slow fsync lands on either side at random.
    """
    engine: list[float] = []
    raw: list[float] = []
    counters: dict[str, int] = {}
    rows: list[Row] = []
    for _ in range(runs):
        with store("sqlite") as open_store:
            _elapsed, counters, rows = one_run(open_store(), steps)
        with store("sqlite") as open_store, tempfile.TemporaryDirectory() as folder:
            RAW.append(RawCommits(Path(folder) / "raw.db", rows, autocommit=autocommit))
            try:
                handle = engine_on(open_store()).start("paired", steps, id="paired")
                if handle.result() != steps:
                    raise RuntimeError("the paired workflow did not complete")
                engine += RAW[-1].engine
                raw += RAW[-1].raw
            finally:
                RAW.pop().conn.close()
    engine_s, raw_s = statistics.median(engine), statistics.median(raw)
    figures = _figures(engine_s * steps, steps, counters)
    figures["raw_us"] = raw_s * 1e6
    figures["ratio"] = engine_s / raw_s
    figures["over_us"] = (engine_s - raw_s) * 1e6
    figures["value_bytes"] = statistics.mean(len(value) for _, _, value in rows)
    return figures


def resume(backend: str, steps: int, runs: int, chain: int = 0) -> dict[str, float]:
    """Median cost for a fresh engine to recover a run parked after ``steps``, then finish it
    (with ``chain``: parked after ``steps`` in the last of ``chain`` continued runs)."""
    recover_s: list[float] = []
    finish_s: list[float] = []
    recover_stats: dict[str, int] = {}
    finish_stats: dict[str, int] = {}
    for _ in range(runs):
        with store(backend) as open_store:
            if chain:
                first = {"steps": steps, "runs": chain, "run": 0}
                engine_on(open_store()).start("chained", first, id="parked")
            else:
                engine_on(open_store()).start("parked", steps, id="parked")
            storage = open_store()  # the first engine is dropped without cleanup
            storage.stats.reset()
            began = time.perf_counter()
            engine = engine_on(storage, recover=True)
            recover_s.append(time.perf_counter() - began)
            recover_stats = storage.stats.snapshot()
            storage.stats.reset()
            began = time.perf_counter()
            engine.signal("parked", "go")
            finish_s.append(time.perf_counter() - began)
            finish_stats = storage.stats.snapshot()
            if engine.get_handle("parked").result() != steps:
                raise RuntimeError("the parked workflow did not complete")
    finish = statistics.median(finish_s)
    return {
        "recover_ms": statistics.median(recover_s) * 1e3,
        "recover_reads": recover_stats["gets"] + recover_stats["scans"],
        "recover_items": recover_stats["scanned_items"],
        "finish_ms": finish * 1e3,
        "us_per_replayed": finish / steps * 1e6,
        "finish_reads": finish_stats["gets"] + finish_stats["scans"],
        "finish_items": finish_stats["scanned_items"],
        "finish_writes": finish_stats["batches"] + finish_stats["conditional_batches"],
    }


def by_mode(steps: int, runs: int) -> None:
    """Print the SQLite per-step figures of each ownership mode, against mode ``none``."""
    print(
        f"\nPer step on SQLite by ownership mode: {steps} steps x {runs} runs, "
        "medians (wall holds the fsyncs; CPU time is the engine's own work)"
    )
    print(
        f"{'mode':<15} {'us/step':>9} {'x none':>7} {'cpu us/step':>12} {'x none':>7} "
        f"{'writes/step':>12} {'requests/step':>14}"
    )
    base: dict[str, float] = {}
    for mode in MODES:
        m = sqlite_by_mode(steps, runs, mode)
        base = base or m
        print(
            f"{mode:<15} {m['us_per_step']:>9.0f} {m['us_per_step'] / base['us_per_step']:>7.2f} "
            f"{m['cpu_us']:>12.0f} {m['cpu_us'] / base['cpu_us']:>7.2f} {m['writes']:>12.3f} "
            f"{m['requests']:>14.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--lengths",
        default=RUN_LENGTHS,
        help=f"comma-separated run lengths for the memory figures (default {RUN_LENGTHS})",
    )
    parser.add_argument("--steps", type=int, default=1000, help="steps in the SQLite run")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument(
        "--raw-autocommit",
        action="store_true",
        help="raw commits as one INSERT each, its own transaction (default: BEGIN, INSERT, COMMIT)",
    )
    parser.add_argument(
        "--modes-only",
        action="store_true",
        help="print only the SQLite per-step figures by ownership mode",
    )
    args = parser.parse_args(argv)
    lengths = [int(length) for length in args.lengths.split(",") if length.strip()]
    began = time.perf_counter()
    print(
        f"weft bench/steps.py: Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version} (synchronous=FULL), {platform.system()} {platform.machine()}"
    )

    if args.modes_only:
        by_mode(args.steps, args.runs)
        return 0

    print(f"\nPer step on memory: N sequential trivial activities, median of {args.runs}")
    print(
        f"{'N':>6} {'us/step':>9} {'best':>7} {'steps/s':>9} {'writes/step':>12} "
        f"{'items/step':>11} {'requests/step':>14}"
    )
    for steps in lengths:
        row = per_step("memory", steps, args.runs)
        print(
            f"{steps:>6} {row['us_per_step']:>9.1f} {row['best_us']:>7.1f} "
            f"{row['steps_per_s']:>9.0f} {row['writes']:>12.3f} {row['items']:>11.3f} "
            f"{row['requests']:>14.3f}"
        )

    raw_kind = "the INSERT alone" if args.raw_autocommit else "BEGIN, INSERT, COMMIT"
    print(
        f"\nPer step on SQLite against a raw SQLite commit of the same bytes (WAL, "
        f"synchronous=FULL, one INSERT per transaction: {raw_kind}), alternating commit by "
        f"commit: {args.steps} steps x {args.runs} runs, medians"
    )
    sq = sqlite_against_raw(args.steps, args.runs, autocommit=args.raw_autocommit)
    print(
        f"{'us/step':>9} {'raw us/commit':>14} {'ratio':>6} {'us over raw':>12} "
        f"{'value bytes':>12} {'writes/step':>12} {'requests/step':>14}"
    )
    print(
        f"{sq['us_per_step']:>9.0f} {sq['raw_us']:>14.0f} {sq['ratio']:>6.2f} "
        f"{sq['over_us']:>12.0f} {sq['value_bytes']:>12.0f} {sq['writes']:>12.3f} "
        f"{sq['requests']:>14.3f}"
    )

    by_mode(args.steps, args.runs)

    print(
        f"\nResume: parked after N steps; a fresh engine recovers it, then a signal finishes it "
        f"(median of {args.runs})"
    )
    print(f"{'':<14} {' Engine.create(recover) ':-^28}  {' signal -> completed ':-^44}")
    print(
        f"{'backend':<8} {'N':>5} {'ms':>9} {'reads':>6} {'items read':>11}  "
        f"{'ms':>9} {'us/N':>8} {'reads':>6} {'items read':>11} {'writes':>6}"
    )
    for backend in ("memory", "sqlite"):
        for steps in HISTORY_LENGTHS:
            r = resume(backend, steps, args.runs)
            print(
                f"{backend:<8} {steps:>5} {r['recover_ms']:>9.2f} {r['recover_reads']:>6.0f} "
                f"{r['recover_items']:>11.0f}  {r['finish_ms']:>9.2f} "
                f"{r['us_per_replayed']:>8.1f} {r['finish_reads']:>6.0f} "
                f"{r['finish_items']:>11.0f} {r['finish_writes']:>6.0f}"
            )
    print(
        f"\nResume after continue_as_new: parked after N={CHAIN_STEPS} steps in the last of R "
        f"runs (R x N steps in all), recovered, then signalled (median of {args.runs})"
    )
    print(f"{'backend':<8} {'R':>3} {'R x N':>6} {'reads':>6} {'items read':>11}  {'ms':>9}")
    for backend in ("memory", "sqlite"):
        for chain in CHAIN_RUNS:
            r = resume(backend, CHAIN_STEPS, args.runs, chain)
            print(
                f"{backend:<8} {chain:>3} {chain * CHAIN_STEPS:>6} {r['finish_reads']:>6.0f} "
                f"{r['finish_items']:>11.0f}  {r['finish_ms']:>9.2f}"
            )
    print(
        "\nreads = gets + range scans (a scan counts once, however many pages it reads)\n"
        "us/N = signal->completed time / N; writes: signal, its step, final commit"
    )
    print(f"total {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
