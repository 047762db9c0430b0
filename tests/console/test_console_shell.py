"""The console's shell: it serves its pages and assets, and says what it looks at."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient


def test_pages_and_assets_are_served(client: FlaskClient) -> None:
    for path in ("/", "/schedules/", "/static/htmx.min.js", "/static/console.css"):
        assert client.get(path).status_code == 200, path
    assert b"SQLite file weft.db" in client.get("/").data


def test_the_shell_renders_in_chromium(page: Any, live_url: str) -> None:
    page.goto(live_url)
    assert page.get_by_test_id("target").inner_text() == "SQLite file weft.db"
    assert page.evaluate("typeof htmx") == "object"  # the vendored htmx loaded
