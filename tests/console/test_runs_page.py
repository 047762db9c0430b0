"""The runs page: filters as the API takes them, counts per status, paging, refusals, live
refresh; details through Flask's test client, the two scenarios of issue 18 in Chromium."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Generator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.workflows import workflows as example_workflows
from weft_serverless import Engine, WorkflowContext, WorkflowDefinition, workflow
from weft_serverless.console.run_filters import epoch_seconds
from weft_serverless.testing import VirtualClock

MakeApp = Callable[..., Flask]
ServeApp = Callable[[Flask], str]


def _waits(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, str]:
    yield ctx.wait_for_signal("close")
    return "closed"


def _done(ctx: WorkflowContext, value: Any) -> Generator[Any, Any, Any]:
    return value
    yield  # a generator that finishes at its first step


TEST_WORKFLOWS = {
    "ticket": workflow("ticket", search_attributes={"customer": str}).execute(_waits),
    "done": workflow("done").execute(_done),
}


@pytest.fixture
def registry() -> dict[str, WorkflowDefinition]:
    """The examples and two small workflows: one waits, one completes at once."""
    return {**example_workflows, **TEST_WORKFLOWS}


@pytest.fixture
def runs(engine: Engine, clock: VirtualClock) -> list[str]:
    """Five runs, a second apart: three tickets (running) and two completed."""
    ids = []
    for n, (kind, customer) in enumerate(
        [("ticket", "c-1"), ("done", None), ("ticket", "c-2"), ("done", None), ("ticket", "c-1")]
    ):
        attributes = {"customer": customer} if customer else None
        tags = ["vip"] if n == 4 else None
        ids.append(engine.start(kind, n, id=f"r-{n}", search_attributes=attributes, tags=tags).id)
        clock.advance(1)
    return ids


def _ids(html: str) -> list[str]:
    return re.findall(r'data-testid="run-link">([^<]+)<', html)


def _count(html: str, status: str) -> int:
    found = re.search(rf'data-testid="count-{status}">[^<]*<b>(\d+)</b>', html)
    assert found is not None, status
    return int(found.group(1))


def test_lists_runs_with_links_and_counts(client: FlaskClient, runs: list[str]) -> None:
    reply = client.get("/")
    html = reply.get_data(as_text=True)
    assert reply.status_code == 200
    assert _ids(html) == runs
    assert 'href="/runs/r-0"' in html
    assert 'class="status-running" data-testid="run-status">running<' in html
    assert (_count(html, "all"), _count(html, "running"), _count(html, "completed")) == (5, 3, 2)
    assert _count(html, "failed") == 0
    assert "{&#34;customer&#34;:&#34;c-2&#34;}" in html  # search attributes, compact


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=completed", ["r-1", "r-3"]),
        ("workflow_type=ticket", ["r-0", "r-2", "r-4"]),
        ("where=%7B%22customer%22%3A+%22c-1%22%7D", ["r-0", "r-4"]),
        ("tags=vip", ["r-4"]),
        ("id_prefix=r-3", ["r-3"]),
        ("order=newest&limit=2", ["r-4", "r-3"]),
        ("started_after=1970-01-01T00%3A00%3A02&started_before=1970-01-01T00%3A00%3A04", None),
        ("status=&where=&tags=", ["r-0", "r-1", "r-2", "r-3", "r-4"]),  # blank is no filter
    ],
)
def test_every_filter_of_the_api(
    client: FlaskClient, engine: Engine, runs: list[str], query: str, expected: list[str] | None
) -> None:
    if expected is None:  # the window [t0 + 2 s, t0 + 4 s) of the virtual clock's start
        start = min(d.created_at for d in engine.list())
        moment = datetime.datetime.fromtimestamp(start + 2, tz=datetime.UTC)
        after = moment.strftime("%Y-%m-%dT%H:%M:%S")
        before = (moment + datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
        query = f"started_after={after}&started_before={before}"
        expected = ["r-2", "r-3"]
    reply = client.get("/?" + query)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    assert _ids(reply.get_data(as_text=True)) == expected


def test_counts_follow_the_filters_but_not_the_status(client: FlaskClient, runs: list[str]) -> None:
    html = client.get("/?status=completed&workflow_type=ticket").get_data(as_text=True)
    assert _ids(html) == []
    assert (_count(html, "running"), _count(html, "completed")) == (3, 0)
    chip = re.search(r'href="([^"]+)" data-testid="count-running"', html)
    assert chip is not None
    assert chip.group(1).replace("&amp;", "&") == "/?status=running&workflow_type=ticket"


def test_pages_through_with_the_cursor(client: FlaskClient, runs: list[str]) -> None:
    seen: list[str] = []
    url = "/?limit=2&workflow_type=ticket"
    for _ in range(3):
        html = client.get(url).get_data(as_text=True)
        seen += _ids(html)
        link = re.search(r'href="([^"]+)" data-testid="next-page"', html)
        if link is None:
            break
        url = link.group(1).replace("&amp;", "&")
        assert "cursor=" in url and "limit=2" in url and "workflow_type=ticket" in url
    assert seen == ["r-0", "r-2", "r-4"]
    assert 'data-testid="first-page"' in html
    assert 'data-testid="next-page"' not in html


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("where=%7Bnot+json", "where"),
        ("status=sleeping", "status"),
        ("limit=0", "limit"),
        ("started_after=yesterday", "started_after"),
        ("cursor=%21%21", None),
    ],
)
def test_a_refused_filter_is_shown_with_the_apis_message(
    client: FlaskClient, runs: list[str], query: str, field: str | None
) -> None:
    reply = client.get("/?" + query)
    html = reply.get_data(as_text=True)
    assert reply.status_code == 400, html
    assert 'data-testid="outcome"' in html and "400" in html
    if field is not None:
        assert f"{field}" in html
    assert 'data-testid="run-row"' not in html
    assert "hx-trigger" not in html  # a refused filter is not polled


def test_the_live_fragment_keeps_the_filters(client: FlaskClient, runs: list[str]) -> None:
    page = client.get("/?status=running&limit=2").get_data(as_text=True)
    poll = re.search(r'hx-get="([^"]+)" data-live hx-trigger="every 2s, shown"', page)
    assert poll is not None
    url = poll.group(1).replace("&amp;", "&")
    assert url == "/runs-fragment?status=running&limit=2"
    fragment = client.get(url).get_data(as_text=True)
    assert "<form" not in fragment and "<html" not in fragment
    assert _ids(fragment) == ["r-0", "r-2"]
    via_header = client.get("/?status=running&limit=2", headers={"HX-Request": "true"})
    assert via_header.get_data(as_text=True) == fragment


def test_a_read_only_console_lists_and_counts(make_app: MakeApp, runs: list[str]) -> None:
    html = make_app(read_only=True).test_client().get("/").get_data(as_text=True)
    assert _ids(html) == runs
    assert _count(html, "running") == 3


def test_refresh_interval_is_the_consoles(make_app: MakeApp, runs: list[str]) -> None:
    html = make_app(refresh_seconds=0.5).test_client().get("/").get_data(as_text=True)
    assert 'hx-trigger="every 0.5s, shown"' in html


def test_datetime_local_is_read_as_utc() -> None:
    assert epoch_seconds("started_after", "1970-01-02T00:00") == 86400.0
    assert epoch_seconds("started_after", "1970-01-02T00:00:01") == 86401.0
    assert epoch_seconds("started_after", "86400.5") == 86400.5


def test_filter_by_status_and_open_a_run_in_chromium(
    page: Any, live_url: str, runs: list[str]
) -> None:
    from playwright.sync_api import expect

    page.goto(live_url)
    expect(page.get_by_test_id("run-row")).to_have_count(5)
    page.get_by_test_id("filter-status").select_option("completed")
    page.get_by_test_id("filter-apply").click()
    expect(page.get_by_test_id("run-row")).to_have_count(2)
    expect(page.get_by_test_id("run-status")).to_have_text(["completed", "completed"])
    page.get_by_test_id("run-link").first.click()
    expect(page).to_have_url(f"{live_url}runs/r-1")


def test_a_new_run_appears_without_reload(
    page: Any, make_app: MakeApp, serve_app: ServeApp, engine: Engine, runs: list[str]
) -> None:
    from playwright.sync_api import expect

    url = serve_app(make_app(refresh_seconds=0.2))
    page.goto(url + "?status=running")
    expect(page.get_by_test_id("run-row")).to_have_count(3)
    engine.start("ticket", 9, id="r-new")
    expect(page.get_by_test_id("run-row")).to_have_count(4)
    expect(page.get_by_test_id("run-link").last).to_have_text("r-new")
    expect(page.get_by_test_id("count-running")).to_contain_text("4")


def test_a_refresh_reads_each_status_partition_once(
    client: FlaskClient, engine: Engine, runs: list[str]
) -> None:
    """A refresh read the page (every status partition) and then the counts (every status
    partition again); the page and its counts now come from one read of each."""
    from weft_serverless import WORKFLOW_STATUSES
    from weft_serverless.storage import keys

    stats = engine.runtime.storage.stats
    for url in ("/runs-fragment", "/runs-fragment?status=running&workflow_type=ticket"):
        stats.reset()
        assert client.get(url).status_code == 200
        assert stats.snapshot()["scans"] == len(WORKFLOW_STATUSES) * keys.STATUS_SHARDS, url


VISIBILITY = """
window.__hidden = false;
Object.defineProperty(document, "hidden", { get: () => window.__hidden });
Object.defineProperty(document, "visibilityState", {
  get: () => (window.__hidden ? "hidden" : "visible"),
});
window.__refreshes = 0;
document.addEventListener("htmx:beforeSend", () => { window.__refreshes += 1; });
"""
"""Lets the test hide and show the tab, and counts the refreshes actually sent."""


def _refreshes_while(page: Any, *, hidden: bool, seconds: float) -> int:
    page.evaluate(
        "hidden => { window.__refreshes = 0; window.__hidden = hidden;"
        " document.dispatchEvent(new Event('visibilitychange')); }",
        hidden,
    )
    page.clock.run_for(int(seconds * 1000))
    return int(page.evaluate("window.__refreshes"))


def test_a_hidden_tab_does_not_refresh_and_refreshes_once_shown(
    page: Any, live_url: str, runs: list[str]
) -> None:
    """One tab left open kept `weft dev` busy: every refresh reads every status entry."""
    page.clock.install()
    page.add_init_script(VISIBILITY)
    page.goto(live_url)
    assert _refreshes_while(page, hidden=False, seconds=4.1) >= 1  # every 2 s
    assert _refreshes_while(page, hidden=True, seconds=20) == 0
    assert _refreshes_while(page, hidden=False, seconds=0) == 1  # at once when shown


def test_previous_walks_back_the_pages_next_went_through(
    client: FlaskClient, runs: list[str]
) -> None:
    def page(url: str) -> tuple[list[str], dict[str, str]]:
        html = client.get(url).get_data(as_text=True)
        links = dict(re.findall(r'href="([^"]+)" data-testid="(\w+-page)"', html))
        return _ids(html), {name: href.replace("&amp;", "&") for href, name in links.items()}

    url = "/?limit=2&order=newest"
    seen = []
    for _ in range(3):
        ids, links = page(url)
        seen.append(ids)
        if "next-page" not in links:
            break
        url = links["next-page"]
    assert seen == [["r-4", "r-3"], ["r-2", "r-1"], ["r-0"]]
    for expected in (["r-2", "r-1"], ["r-4", "r-3"]):
        url = links["previous-page"]
        ids, links = page(url)
        assert ids == expected
    assert "previous-page" not in links and "first-page" not in links  # back at the start
    assert "order=newest" in url and "limit=2" in url
    chip = re.search(
        r'href="([^"]+)" data-testid="count-running"', client.get(url).get_data(as_text=True)
    )
    assert chip is not None and "back=" not in chip.group(1)  # a new filter starts afresh


def test_the_type_field_matches_the_start_of_a_type(client: FlaskClient, runs: list[str]) -> None:
    html = client.get("/?type_prefix=tic").get_data(as_text=True)
    assert _ids(html) == ["r-0", "r-2", "r-4"]
    assert 'name="type_prefix" value="tic"' in html
    assert _count(html, "running") == 3 and _count(html, "completed") == 0
