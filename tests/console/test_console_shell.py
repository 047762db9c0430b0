"""The console's shell: it serves its pages and assets, says what it looks at, and answers
only requests addressed to it by a loopback name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

MakeApp = Callable[..., Flask]
HTMX = {"HX-Request": "true"}


def test_pages_and_assets_are_served(client: FlaskClient) -> None:
    for path in ("/", "/schedules/", "/static/htmx.min.js", "/static/console.css"):
        assert client.get(path).status_code == 200, path
    assert b"SQLite file weft.db" in client.get("/").data


def test_the_shell_renders_in_chromium(page: Any, live_url: str) -> None:
    page.goto(live_url)
    assert page.get_by_test_id("target").inner_text() == "SQLite file weft.db"
    assert page.evaluate("typeof htmx") == "object"  # the vendored htmx loaded


def test_a_request_for_another_host_name_is_refused(make_app: MakeApp) -> None:
    """DNS rebinding: a page of evil.example re-pointed at 127.0.0.1 is same-origin for the
    browser, but its requests name evil.example as their Host."""
    client = make_app().test_client()
    for host in ("localhost", "127.0.0.1:8484", "[::1]:8484"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    refused = client.get("/", headers={"Host": "evil.example:8484"})
    assert refused.status_code == 403
    assert client.post("/start", headers={**HTMX, "Host": "evil.example"}).status_code == 403

    opened = make_app(allowed_hosts=None).test_client()  # bound beyond loopback on purpose
    assert opened.get("/", headers={"Host": "console.internal"}).status_code == 200
