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
    assert 'data-testid="schedule-create"' not in html and "schedule-delete" not in html
    posts = [f"/schedules/{SCHEDULE_ID}/{a}" for a in ("pause", "resume", "trigger", "delete")]
    window = {"start": "2025-12-31T00:00:00", "end": "2025-12-31T01:00:00"}
    for path, form in [*((p, {}) for p in posts), (f"/schedules/{SCHEDULE_ID}/backfill", window)]:
        reply = client.post(path, data=form, headers=HTMX)
        assert reply.status_code == 403, path
        assert "ReadOnlyConsoleError" in reply.get_data(as_text=True)
    created = client.post("/schedules/", data=CREATE, headers=HTMX)
    assert created.status_code == 403
    described = engine.get_schedule(SCHEDULE_ID).describe()
    assert (described.paused, described.fired) == (False, 0)
    assert sorted(s.id for s in engine.list_schedules()) == schedules
    assert engine.list() == []


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


CREATE = {
    "schedule_id": "every-90s",
    "workflow_type": "reminder",
    "every": "90s",
    "overlap": "allow",
    "jitter": "5",
    "input": '{"to": "ada", "text": "stand up", "delay": "1m"}',
}


def test_create_a_schedule_from_the_form(client: FlaskClient, engine: Engine) -> None:
    reply = client.post("/schedules/", data=CREATE, headers=HTMX)
    assert reply.status_code == 204
    assert reply.headers["HX-Redirect"] == "/schedules/?created=every-90s#schedule-every-90s"
    described = engine.get_schedule("every-90s").describe()
    assert (described.workflow_type, described.every, described.overlap) == (
        "reminder",
        90,
        "allow",
    )
    assert (described.jitter, described.input["to"]) == (5, "ada")
    page = client.get("/schedules/?created=every-90s").get_data(as_text=True)
    assert 'data-testid="created">created schedule <span class="mono">every-90s</span>' in page
    assert 'id="schedule-every-90s"' in page


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"input": "{to: ada}"}, "400 InvalidArgumentError</strong>: input: is not JSON"),
        ({"cron": "0 2 * * *"}, "400 InvalidScheduleError"),  # cron and every both
        ({"workflow_type": "nope"}, "UnknownWorkflowTypeError"),
        ({"every": "soon"}, "every"),
        ({"schedule_id": ""}, "schedule_id"),
    ],
)
def test_a_refused_schedule_is_shown_and_nothing_is_created(
    client: FlaskClient, engine: Engine, change: dict[str, str], message: str
) -> None:
    reply = client.post("/schedules/", data={**CREATE, **change}, headers=HTMX)
    assert reply.status_code >= 400
    assert message in reply.get_data(as_text=True)
    assert engine.list_schedules() == []


def test_delete_keeps_the_runs_it_started(
    client: FlaskClient, engine: Engine, schedules: list[str]
) -> None:
    run = engine.get_schedule("tick").trigger()
    assert run is not None
    reply = client.post("/schedules/tick/delete", headers=HTMX)
    html = reply.get_data(as_text=True)
    assert reply.status_code == 200
    assert '<div class="outcome ok" role="status" data-testid="outcome">deleted;' in html
    assert [s.id for s in engine.list_schedules()] == [SCHEDULE_ID]
    assert engine.describe(run.id).id == run.id  # its run is still there


def test_backfill_starts_the_fires_of_a_past_window(
    client: FlaskClient, engine: Engine, clock: Any, schedules: list[str]
) -> None:
    from weft_serverless.console.formatting import timestamp

    clock.advance(600)  # ten minutes of a 90 s schedule
    start, end = clock() - 600, clock()
    window = {
        name: timestamp(at).replace(" ", "T") for name, at in (("start", start), ("end", end))
    }
    reply = client.post("/schedules/tick/backfill", data=window, headers=HTMX)
    html = reply.get_data(as_text=True)
    assert reply.status_code == 200, html
    started = [row.id for row in engine.list(workflow_type="reminder")]
    assert started and f"backfilled: {len(started)} run(s) started: " in html
    assert f'<a href="/runs/{started[0]}">{started[0]}</a>' in html
    future = {"start": window["end"], "end": timestamp(end + 3600).replace(" ", "T")}
    refused = client.post("/schedules/tick/backfill", data=future, headers=HTMX)
    assert refused.status_code == 400 and "InvalidScheduleError" in refused.get_data(as_text=True)
    missing = client.post("/schedules/tick/backfill", data={"start": ""}, headers=HTMX)
    assert missing.status_code == 400 and "start: is required" in missing.get_data(as_text=True)


def test_create_backfill_and_delete_in_chromium(
    page: Any, live_url: str, engine: Engine, clock: Any
) -> None:
    from playwright.sync_api import expect

    from weft_serverless.console.formatting import timestamp

    page.goto(live_url + "schedules/")
    page.get_by_test_id("schedule-create").locator("summary").click()
    page.get_by_test_id("create-id").fill("every-90s")
    page.get_by_test_id("create-type").select_option("reminder")
    page.get_by_test_id("create-every").fill("90s")
    page.get_by_test_id("create-cron").fill("0 2 * * *")  # both: the API refuses
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("create-outcome")).to_contain_text("400 InvalidScheduleError")
    page.get_by_test_id("create-cron").fill("")
    page.get_by_test_id("create-input").fill(CREATE["input"])
    page.get_by_test_id("create-submit").click()
    expect(page.get_by_test_id("created")).to_contain_text("every-90s")
    row = page.locator('[data-schedule="every-90s"]')
    expect(row.get_by_test_id("schedule-id")).to_have_text("every-90s")

    clock.advance(600)
    row.get_by_test_id("schedule-backfill-form").locator("summary").click()
    row.get_by_test_id("backfill-start").fill(timestamp(clock() - 600).replace(" ", "T"))
    row.get_by_test_id("backfill-end").fill(timestamp(clock()).replace(" ", "T"))
    row.get_by_test_id("schedule-backfill").click()
    expect(row.get_by_test_id("outcome")).to_contain_text("backfilled: ")
    assert engine.list(workflow_type="reminder")

    row.get_by_test_id("schedule-delete").click()
    expect(row.get_by_test_id("outcome")).to_contain_text("deleted; the runs it started go on")
    assert engine.list_schedules() == []
