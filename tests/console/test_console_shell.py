"""The console's shell: it serves its pages and assets, says what it looks at, and answers
only requests addressed to it by a loopback name."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from examples.order import SAMPLE_ORDER
from examples.reminder import SAMPLE_INPUT as REMINDER
from weft_serverless import Engine

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


CSP_DIRECTIVES = {
    "default-src": "'none'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "connect-src": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
}
"""What every answer of the console's policy says: its own files only, nothing inline but
style attributes (the timeline's bars), and no page of any origin may frame it."""


def _policy(header: str) -> dict[str, str]:
    directives = (part.strip().split(" ", 1) for part in header.split(";") if part.strip())
    return {name: value for name, value in directives}


def test_every_answer_forbids_framing_and_foreign_assets(make_app: MakeApp) -> None:
    """Clickjacking: a page of another origin framed a run page and its Suspend button
    worked. Every answer (pages, fragments, assets, refusals) now says no frame."""
    client = make_app().test_client()
    answers = {
        "runs page": client.get("/"),
        "runs fragment": client.get("/runs-fragment"),
        "schedules page": client.get("/schedules/"),
        "missing run": client.get("/runs/none"),
        "asset": client.get("/static/console.css"),
        "refused post": client.post("/runs/none/act/cancel"),
        "other host": client.get("/", headers={"Host": "evil.example"}),
    }
    for what, answer in answers.items():
        headers = answer.headers
        assert headers.get("X-Frame-Options") == "DENY", what
        policy = _policy(headers.get("Content-Security-Policy", ""))
        assert {name: policy.get(name) for name in CSP_DIRECTIVES} == CSP_DIRECTIVES, what
        assert policy.get("style-src-attr") == "'unsafe-inline'", what
        assert headers.get("X-Content-Type-Options") == "nosniff", what
        assert headers.get("Referrer-Policy") == "same-origin", what


def test_a_page_of_another_origin_cannot_frame_a_run_page(
    page: Any, engine: Engine, live_url: str, serve_app: Callable[[Flask], str]
) -> None:
    """The framing page is served from another origin (another port); Chromium refuses to
    show the console inside it, so there is no Suspend button to trick a click onto."""
    engine.start("reminder", REMINDER, id="r1")
    victim = f"{live_url}runs/r1"
    framer = Flask("framer")
    framer.add_url_rule(
        "/", "frame", lambda: f'<iframe id="victim" src="{victim}" width="900" height="700">'
    )
    page.goto(serve_app(framer))
    page.wait_for_load_state("load")  # waits for the frame's own load, shown or refused
    framed = [frame for frame in page.frames if frame is not page.main_frame]
    assert len(framed) == 1
    assert framed[0].url != victim and framed[0].url.startswith("chrome-error:")
    assert page.frame_locator("#victim").get_by_test_id("action-suspend").count() == 0
    assert engine.describe("r1").status == "running"


FIRST_BAR = """() => {
  const bar = document.querySelector('[data-testid="step-bar"]');
  return {position: getComputedStyle(bar).position, width: bar.getBoundingClientRect().width};
}"""
WATCH_POLICY = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(event.violatedDirective + " " + event.blockedURI);
});
"""


def test_the_policy_lets_the_consoles_own_pages_work(
    page: Any, make_app: MakeApp, serve_app: Callable[[Flask], str], engine: Engine
) -> None:
    """Every page under the policy: its scripts run (htmx loaded, the start form filled
    from the samples, a live refresh swapped in, a folded value fetched), its styles and
    its bars' inline widths apply, and the browser reports no violation."""
    from playwright.sync_api import expect

    from examples.workflows import SAMPLES

    engine.start("order", {**SAMPLE_ORDER, "note": "x" * 400}, id="o1")
    url = serve_app(make_app(samples=SAMPLES, refresh_seconds=0.2))
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text))
    page.add_init_script(WATCH_POLICY)

    page.goto(url)
    assert page.evaluate("typeof htmx") == "object"
    picked = page.get_by_test_id("start-type").input_value()
    assert json.loads(page.get_by_test_id("start-input").input_value()) == SAMPLES[picked]
    with page.expect_response(lambda answer: "/runs-fragment" in answer.url):
        pass  # a live refresh came through htmx
    assert page.evaluate("window.__violations") == []

    page.goto(f"{url}runs/o1")
    # Read in one script: the section is swapped every 0.2 s, and a detached bar has no box.
    bar = page.evaluate(FIRST_BAR)
    assert bar["position"] == "absolute" and bar["width"] > 1, bar
    page.get_by_test_id("value-input").locator("summary").click()
    expect(page.get_by_test_id("value-full")).to_contain_text('"note"')
    assert page.evaluate("window.__violations") == []

    page.goto(f"{url}schedules/")
    assert page.evaluate("window.__violations") == []
    assert not [text for text in errors if "Content Security Policy" in text], errors


def test_the_console_has_an_icon(client: FlaskClient) -> None:
    page = client.get("/").get_data(as_text=True)
    assert '<link rel="icon" type="image/svg+xml" href="/static/favicon.svg">' in page
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
    assert icon.get_data(as_text=True).startswith("<svg")
    asked = client.get("/favicon.ico")  # where browsers look first
    assert (asked.status_code, asked.headers["Location"]) == (308, "/static/favicon.svg")
