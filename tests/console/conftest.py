"""The console under test: an engine on a SQLite file with every example workflow, on a
virtual clock, served to Flask's test client or, for browser tests, over loopback to
Debian's headless Chromium driven by Playwright.

``bash scripts/test`` installs Chromium (``apt-get install chromium``) before the suite; a
machine without it fails the browser tests with that instruction, it does not skip them.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.workflows import workflows as example_workflows
from weft_serverless import Engine, SQLiteStorage, WorkflowDefinition
from weft_serverless.console.app import Console, create_app
from weft_serverless.console.server import bind, url_of
from weft_serverless.testing import VirtualClock

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""What Chromium needs on a closed network, as root: no sandbox, no calls home."""
BROWSER_TIMEOUT_MS = 10_000


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "weft.db"


@pytest.fixture
def registry() -> Mapping[str, WorkflowDefinition]:
    """The workflows the console's engine knows: every example (a test module may add its
    own by overriding this fixture)."""
    return example_workflows


@pytest.fixture
def engine(
    db_path: Path, clock: VirtualClock, registry: Mapping[str, WorkflowDefinition]
) -> Iterator[Engine]:
    """The examples' engine: it drives runs inline, as ``weft console --workflows`` does."""
    storage = SQLiteStorage(db_path)
    engine = Engine.create(
        storage,
        dict(registry),
        clock=clock,
        background_tasks="manual",
        recover=False,
        max_parallel_activities=0,
    )
    yield engine
    engine.close()
    storage.close()


MakeApp = Callable[..., Flask]


@pytest.fixture
def make_app(engine: Engine, db_path: Path) -> MakeApp:
    """An app on ``engine``; ``read_only=True`` gives the console a reader engine, as
    ``weft console --read-only`` does."""

    def make(*, read_only: bool = False, **options: Any) -> Flask:
        used = engine
        if read_only:
            from weft_serverless import read_only_engine

            used = read_only_engine(engine.runtime.storage, "console-reader")
        console = Console(
            engine=used,
            target=f"SQLite file {db_path.name}",
            read_only=read_only,
            drives=not read_only,
            **options,
        )
        return create_app(console, config={"TESTING": True})

    return make


@pytest.fixture
def app(make_app: MakeApp) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


ServeApp = Callable[[Flask], str]


@pytest.fixture
def serve_app() -> Iterator[ServeApp]:
    """Serve apps on loopback for the test's duration; each call returns its URL."""
    servers: list[Any] = []

    def serve(app: Flask) -> str:
        server = bind(app, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return url_of(server)

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def live_url(app: Flask, serve_app: ServeApp) -> str:
    return serve_app(app)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the whole run (a start costs about a second)."""
    if shutil.which("chromium") is None and not Path(CHROMIUM).exists():
        pytest.fail(
            "the browser tests need Debian's chromium: run `bash scripts/test`, which installs "
            "it with apt-get (as root), or `apt-get install chromium` yourself"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (its own cookies and storage) that accepts every confirmation dialog."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    yield tab
    context.close()
