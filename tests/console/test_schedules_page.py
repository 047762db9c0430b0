"""The schedules page: every schedule with its next fire and counters, and pause, resume and
trigger through the API's operations; none of them in a read-only console."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.scheduled_report import SCHEDULE_ID, ensure_schedule
from weft_serverless import Engine

MakeApp = Callable[..., Flask]

HTMX = {"HX-Request": "true"}


@pytest.fixture
def schedules(engine: Engine) -> list[str]:
    ensure_schedule(engine)
    engine.schedule("tick", "reminder", input={}, every="90s", overlap="allow")
    return ["nightly-report", "tick"]


def test_lists_every_schedule(client: FlaskClient, engine: Engine, schedules: list[str]) -> None:
    reply = client.get("/schedules/")
    html = reply.get_data(as_text=True)
    assert reply.status_code == 200
    assert html.count('data-testid="schedule-row"') == 2
    for text in ("nightly-report", "scheduled_report", "0 2 * * *", "Europe/Berlin", "skip"):
        assert text in html
    assert "every 1 m 30 s" in html and "allow" in html
    next_fire = engine.get_schedule(SCHEDULE_ID).describe().next_fire_at
    assert next_fire is not None
    from weft_serverless.console.formatting import timestamp

    assert timestamp(next_fire) in html
    assert 'data-testid="schedule-pause"' in html and 'hx-confirm="Pause schedule tick?"' in html


def test_pause_then_resume(client: FlaskClient, engine: Engine, schedules: list[str]) -> None:
    paused = client.post(f"/schedules/{SCHEDULE_ID}/pause", headers=HTMX)
    html = paused.get_data(as_text=True)
    assert paused.status_code == 200
    assert engine.get_schedule(SCHEDULE_ID).describe().paused
    assert 'data-testid="schedule-paused"' in html and 'data-testid="schedule-resume"' in html
    assert '<div class="outcome ok" role="status" data-testid="outcome">paused</div>' in html
    assert html.count("<tr") == 1  # the row alone, to swap in place
    resumed = client.post(f"/schedules/{SCHEDULE_ID}/resume", headers=HTMX)
    assert resumed.status_code == 200
    assert not engine.get_schedule(SCHEDULE_ID).describe().paused
    assert 'data-testid="schedule-pause"' in resumed.get_data(as_text=True)


def test_trigger_starts_a_run_and_links_it(
    client: FlaskClient, engine: Engine, schedules: list[str]
) -> None:
    reply = client.post(f"/schedules/{SCHEDULE_ID}/trigger", headers=HTMX)
    html = reply.get_data(as_text=True)
    assert reply.status_code == 200
    described = engine.get_schedule(SCHEDULE_ID).describe()
    assert described.fired == 1
    run_id = engine.list()[0].id
    assert run_id.startswith(SCHEDULE_ID)
    assert f'triggered: <a href="/runs/{run_id}">{run_id}</a>' in html
    assert 'data-testid="schedule-counts">1 / 0 / 0<' in html


def test_an_unknown_schedule_answers_the_apis_404(client: FlaskClient) -> None:
    reply = client.post("/schedules/nope/pause", headers=HTMX)
    html = reply.get_data(as_text=True)
    assert reply.status_code == 404
    assert "404 ScheduleNotFoundError" in html


def test_read_only_hides_and_refuses_actions(
    make_app: MakeApp, engine: Engine, schedules: list[str]
) -> None:
    client = make_app(read_only=True).test_client()
    html = client.get("/schedules/").get_data(as_text=True)
    assert html.count('data-testid="schedule-row"') == 2
    assert "hx-post" not in html and "<th>Actions</th>" not in html
    for action in ("pause", "resume", "trigger"):
        reply = client.post(f"/schedules/{SCHEDULE_ID}/{action}", headers=HTMX)
        assert reply.status_code == 403, action
        assert "ReadOnlyConsoleError" in reply.get_data(as_text=True)
    described = engine.get_schedule(SCHEDULE_ID).describe()
    assert (described.paused, described.fired) == (False, 0)


def test_pause_trigger_resume_in_chromium(
    page: Any, live_url: str, engine: Engine, schedules: list[str]
) -> None:
    from playwright.sync_api import expect

    page.goto(live_url + "schedules/")
    row = page.locator(f'[data-schedule="{SCHEDULE_ID}"]')
    row.get_by_test_id("schedule-pause").click()  # the page accepts the confirmation
    expect(row.get_by_test_id("outcome")).to_have_text("paused")
    expect(row.get_by_test_id("schedule-paused")).to_be_visible()
    row.get_by_test_id("schedule-trigger").click()
    expect(row.get_by_test_id("outcome")).to_contain_text("triggered: nightly-report")
    expect(row.get_by_test_id("schedule-counts")).to_have_text("1 / 0 / 0")
    row.get_by_test_id("schedule-resume").click()
    expect(row.get_by_test_id("outcome")).to_have_text("resumed")
    assert not engine.get_schedule(SCHEDULE_ID).describe().paused
    engine.get_schedule(SCHEDULE_ID).delete()  # gone behind the page's back: the API's 404
    row.get_by_test_id("schedule-pause").click()
    expect(row.get_by_test_id("outcome")).to_contain_text("404 ScheduleNotFoundError")


def test_relative_times_are_against_the_engines_clock(
    client: FlaskClient, schedules: list[str]
) -> None:
    """The engine runs on a virtual clock set months before the wall clock: the interval
    schedule's next fire, 90 s ahead of engine time, reads "in 1 m 30 s", not months ago."""
    html = client.get("/schedules/").get_data(as_text=True)
    assert "in 1 m 30 s" in html
    assert " ago<" not in html
