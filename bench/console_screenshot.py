"""Save the README's picture of the console's run page: a completed ``order`` run.

Runs the order example on a SQLite file with a virtual clock (the warehouse signals "ship"
four minutes in, so the timeline shows where the time went), serves the console on
loopback and photographs the run page in headless Chromium (Debian's ``chromium``, as the
browser tests use) at 1280x900, whole page. Not part of the test suite: run it when the
page changes. Run: ``python bench/console_screenshot.py [OUT.png]`` (default
docs/console-run.png).
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples.order import SAMPLE_ORDER  # noqa: E402
from examples.workflows import workflows  # noqa: E402
from weft_serverless import Engine, SQLiteStorage  # noqa: E402
from weft_serverless.console.app import Console, create_app  # noqa: E402
from weft_serverless.console.server import bind, url_of  # noqa: E402
from weft_serverless.testing import VirtualClock  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
RUN_ID = "order-A-1001"


def completed_order(engine: Engine, clock: VirtualClock) -> None:
    """An order that waited four minutes for the warehouse, then shipped express."""
    engine.start("order", SAMPLE_ORDER, id=RUN_ID, tags=["web", "express"])
    clock.advance(4 * 60)
    engine.signal(RUN_ID, "ship", {"carrier": "express"})
    clock.advance(90)  # looked at a little later


def main(out: Path) -> None:
    from playwright.sync_api import sync_playwright

    clock = VirtualClock()
    with tempfile.TemporaryDirectory() as folder:
        storage = SQLiteStorage(Path(folder) / "weft.db")
        engine = Engine.create(
            storage, workflows, clock=clock, background_tasks="manual", recover=False
        )
        completed_order(engine, clock)
        app = create_app(Console(engine, "SQLite file weft.db", drives=True))
        server = bind(app)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{url_of(server)}runs/{RUN_ID}")
                page.get_by_test_id("timeline").wait_for()
                page.screenshot(path=str(out), full_page=True)
                browser.close()
        finally:
            server.shutdown()
            server.server_close()
            engine.close()
            storage.close()
    print(f"saved {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "console-run.png")
