"""What one live refresh of the console's runs page costs the store, on SQLite and DynamoDB.

Starts the runs (a third complete at once, the rest wait for a signal) on a SQLite file and
on an in-process moto DynamoDB table (what ``weft dev`` serves), then fetches the runs
page's live fragment as the browser does every ``--refresh`` seconds, unfiltered and
filtered by status, and prints per refresh: storage reads (partition range reads) and items
read, DynamoDB ``Query`` requests, read units and bytes, and the CPU time it took in this
process (moto included, as in ``weft dev``). Prints, does not assert.
Run: ``python bench/console_refresh.py [runs] [refreshes]``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from weft_serverless import Engine, SQLiteStorage, workflow
from weft_serverless.console.app import Console, create_app
from weft_serverless.storage.base import Storage

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
REFRESHES = int(sys.argv[2]) if len(sys.argv) > 2 else 5
PAGES = {"all statuses": "/runs-fragment", "status=running": "/runs-fragment?status=running"}


def _waits(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.wait_for_signal("close")


def _done(ctx, value):  # type: ignore[no-untyped-def]
    return value
    yield


WORKFLOWS = {"ticket": workflow("ticket").execute(_waits), "done": workflow("done").execute(_done)}


@contextmanager
def sqlite() -> Iterator[Storage]:
    with tempfile.TemporaryDirectory() as folder:
        storage = SQLiteStorage(Path(folder) / "weft.db")
        yield storage
        storage.close()


@contextmanager
def dynamodb() -> Iterator[Storage]:
    from weft_serverless.testing_moto import moto_dynamodb

    with moto_dynamodb() as moto:
        yield moto.storage()


def measure(storage: Storage) -> None:
    engine = Engine.create(storage, WORKFLOWS, background_tasks="manual", recover=False)
    for n in range(RUNS):
        engine.start("done" if n % 3 == 0 else "ticket", n, id=f"r-{n:06d}")
    client = create_app(Console(engine, "bench"), config={"TESTING": True}).test_client()
    meter: Any = getattr(storage, "meter", None)
    for name, url in PAGES.items():
        assert client.get(url).status_code == 200
        storage.stats.reset()
        if meter is not None:
            meter.reset()
        cpu = []
        for _ in range(REFRESHES):
            began = time.process_time()
            client.get(url)
            cpu.append((time.process_time() - began) * 1000)
        stats = storage.stats.snapshot()
        line = (
            f"  {name:<16} reads {stats['scans'] / REFRESHES:>5.0f}  "
            f"items {stats['scanned_items'] / REFRESHES:>7.0f}"
        )
        if meter is not None:
            seen = meter.snapshot()
            kilobytes = seen.bytes_read / REFRESHES / 1024
            line += (
                f"  Query {seen.requests / REFRESHES:>4.0f}  read units "
                f"{seen.read_units / REFRESHES:>5.0f}  KB {kilobytes:>6.0f}"
            )
        print(f"{line}  CPU {statistics.median(cpu):>6.0f} ms")
    engine.close()


def main() -> None:
    print(f"one refresh of the runs page over {RUNS} runs (median of {REFRESHES}):")
    for label, opened in (("SQLite", sqlite), ("DynamoDB (moto)", dynamodb)):
        print(label)
        with opened() as storage:
            measure(storage)


if __name__ == "__main__":
    main()
