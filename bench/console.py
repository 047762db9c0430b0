"""Console page loads over 10,000 runs on a SQLite file, through Flask's test client.

Starts the runs (a third complete at once, the rest wait for a signal and carry a
``customer`` search attribute), then loads each page about 20 times and prints the median and
the slowest load in milliseconds: the runs page (first page, filtered by status, deep by
cursor, filtered by ``where``), a run's page and the schedules page. Issue 18 asks for under
300 ms each. Prints, does not assert. Run: ``python bench/console.py [runs] [loads]``.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from weft_serverless import Engine, SQLiteStorage, workflow
from weft_serverless.console.app import Console, create_app

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
LOADS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
CUSTOMERS = 50


def _waits(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.wait_for_signal("close")
    return "closed"


def _done(ctx, value):  # type: ignore[no-untyped-def]
    return value
    yield


WORKFLOWS = {
    "ticket": workflow("ticket", search_attributes={"customer": str}).execute(_waits),
    "done": workflow("done").execute(_done),
}


def fill(engine: Engine) -> float:
    """Start ``RUNS`` runs; returns seconds taken."""
    began = time.perf_counter()
    for n in range(RUNS):
        if n % 3 == 0:
            engine.start("done", n, id=f"done-{n:06d}")
        else:
            customer = f"c-{n % CUSTOMERS}"
            engine.start(
                "ticket", n, id=f"ticket-{n:06d}", search_attributes={"customer": customer}
            )
    for n in range(3):
        engine.schedule(f"every-{n}", "done", input=n, every=f"{n + 1}h")
    return time.perf_counter() - began


def time_loads(client: Any, url: str) -> tuple[float, float, int]:
    """Median and max ms of ``LOADS`` loads of ``url``, and the status of the last."""
    took = []
    status = 0
    for _ in range(LOADS):
        began = time.perf_counter()
        reply = client.get(url)
        took.append((time.perf_counter() - began) * 1000)
        status = reply.status_code
    return statistics.median(took), max(took), status


def deep_cursor(client: Any, pages: int) -> str:
    """The URL of page ``pages`` of 50, reached by following next-page links."""
    url = "/"
    for _ in range(pages):
        html = client.get(url).get_data(as_text=True)
        found = re.search(r'href="([^"]+)" data-testid="next-page"', html)
        assert found is not None
        url = found.group(1).replace("&amp;", "&")
    return url


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        storage = SQLiteStorage(Path(folder) / "weft.db")
        engine = Engine.create(storage, WORKFLOWS, background_tasks="manual", recover=False)
        seconds = fill(engine)
        print(f"started {RUNS} runs in {seconds:.1f} s ({RUNS / seconds:.0f} runs/s)")
        app = create_app(Console(engine=engine, target="bench"), config={"TESTING": True})
        client = app.test_client()
        where = quote('{"customer": "c-7"}')
        pages = {
            "runs, first page": "/",
            "runs, status=completed": "/?status=completed",
            f"runs, page {min(100, RUNS // 50 - 1) + 1} by cursor": deep_cursor(
                client, min(100, RUNS // 50 - 1)
            ),
            'runs, where={"customer": "c-7"}': f"/?where={where}",
            "runs live fragment": "/runs-fragment",
            "run page": "/runs/ticket-000001",
            "schedules page": "/schedules/",
        }
        print(f"{'page':<34} {'median ms':>10} {'max ms':>8}  ({LOADS} loads each)")
        for name, url in pages.items():
            median, slowest, status = time_loads(client, url)
            assert status == 200, (name, status)
            print(f"{name:<34} {median:>10.1f} {slowest:>8.1f}")
        engine.close()
        storage.close()


if __name__ == "__main__":
    main()
