"""How long the console's run page takes to render, in a SQLite store of 10,000 runs.

The page reads one run (its state, its partition and its events), so its time should not
depend on how many runs the store holds: the store is seeded with 10,000 parked runs'
state records (batches of 100, as ``bench/visibility.py`` seeds), then real runs of the
examples are driven by the engine: a completed ``order`` (five steps and a signal), a
``batch`` parent and one of its children, a parked ``approval``. Each page is loaded
``LOADS`` times through Flask's test client (the server's whole work: reads, rendering, no
network) and the median and slowest times are printed, with the page's size. Run:
``python bench/console_run_page.py``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.workflows import SAMPLES, workflows
from weft_serverless import Engine, SQLiteStorage
from weft_serverless.console.app import Console, create_app
from weft_serverless.engine.persistence.records import RUNNING, WorkflowState
from weft_serverless.storage import keys
from weft_serverless.storage.base import Put
from weft_serverless.testing import VirtualClock

RUNS = 10_000
LOADS = 50
T0 = 1_767_225_600.0


def seed(storage: SQLiteStorage) -> None:
    """10,000 parked runs' state records, in atomic batches of 100."""
    for first in range(0, RUNS, 100):
        batch = []
        for n in range(first, first + 100):
            state = WorkflowState(
                id=f"seed-{n:05d}",
                type="order",
                version="1",
                status=RUNNING,
                input=b"\xc0",
                created_at=T0 + n,
                updated_at=T0 + n,
            )
            batch.append(Put(keys.state_key(state.id), state.to_bytes()))
        storage.batch(batch)


def main() -> None:
    clock = VirtualClock()
    with tempfile.TemporaryDirectory() as folder:
        storage = SQLiteStorage(Path(folder) / "weft.db")
        seed(storage)
        engine = Engine.create(
            storage, workflows, clock=clock, background_tasks="manual", recover=False
        )
        engine.start("order", SAMPLES["order"], id="order-1")
        clock.advance(240)
        engine.signal("order-1", "ship", {"carrier": "express"})
        engine.start("batch", SAMPLES["batch"], id="batch-1")
        engine.start("approval", SAMPLES["approval"], id="approval-1")
        client = create_app(Console(engine, "bench", drives=True)).test_client()
        print(f"run page render time, SQLite store of {RUNS:,} seeded runs, {LOADS} loads each")
        print(f"{'run':<22}{'median ms':>10}{'max ms':>10}{'KB':>8}")
        for run in ("order-1", "batch-1", "batch-1-chunk-000", "approval-1"):
            times, size = [], 0
            for _ in range(LOADS):
                started = time.perf_counter()
                response = client.get(f"/runs/{run}")
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, run
                size = len(response.data)
            median, slowest = statistics.median(times), max(times)
            print(f"{run:<22}{median:>10.1f}{slowest:>10.1f}{size / 1024:>8.1f}")
        engine.close()
        storage.close()


if __name__ == "__main__":
    main()
