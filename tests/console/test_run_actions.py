"""The run page's actions through Flask's test client: each one's success and its refusal
with the API's code and message, the refreshed section that comes with the answer, and
read-only mode hiding and refusing them all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from run_html import find, text, texts

from examples.approval import SAMPLE_INPUT as APPROVAL
from examples.order import SAMPLE_ORDER
from examples.reminder import SAMPLE_INPUT as REMINDER
from weft_serverless import Engine
from weft_serverless.console.app import Console, create_app
from weft_serverless.testing import VirtualClock

HTMX = {"HX-Request": "true"}
"""The header htmx sends with every request it makes."""
ACTIONS = ("signal", "update", "query", "suspend", "resume", "retry", "cancel", "purge")


def act(client: FlaskClient, workflow_id: str, action: str, **form: str) -> str:
    """Post ``action`` as the page's htmx does; refusals are answered 200 too, so htmx
    swaps them in where the operator clicked."""
    response = client.post(f"/runs/{workflow_id}/act/{action}", data=form, headers=HTMX)
    assert response.status_code == 200, response.data[:400]
    return response.get_data(as_text=True)


def refreshed_status(answer: str) -> str:
    """The run status in the section swapped in out of band with the answer."""
    section = find(answer, "run-section")
    assert len(section) == 1 and section[0].attrs.get("hx-swap-oob") == "true"
    return text(answer, "run-status")


def test_every_action_posts_to_its_route_and_asks_first(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("approval", APPROVAL, id="o1")  # running, with a query: all it allows
    html = client.get("/runs/o1").get_data(as_text=True)
    posts = [
        element.attrs
        for testid in ("signal-form", "update-form", "query-form")
        for element in find(html, testid)
    ] + [element.attrs for action in ACTIONS[3:] for element in find(html, f"action-{action}")]
    offered = ("signal", "update", "query", "suspend", "cancel")
    assert [attrs["hx-post"] for attrs in posts] == [f"/runs/o1/act/{a}" for a in offered]
    assert all(attrs["hx-confirm"] and attrs["hx-target"] == "#action-result" for attrs in posts)
    assert find(html, "signal-payload")[0].attrs.get("data-json") == ""  # checked as JSON


def test_a_signal_with_a_json_payload_advances_the_run(client: FlaskClient, engine: Engine) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    answer = act(client, "o1", "signal", name="ship", payload='{"carrier": "express"}')
    assert text(answer, "outcome") == "signal sent; the run is completed"
    assert refreshed_status(answer) == "completed"
    assert engine.get_handle("o1").result()["carrier"] == "express"


def test_a_payload_that_is_not_json_is_refused_before_anything_is_sent(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    answer = act(client, "o1", "signal", name="ship", payload="{carrier: express}")
    assert text(answer, "outcome").startswith(
        "400 InvalidArgumentError: payload: is not valid JSON (Expecting property name"
    )
    assert refreshed_status(answer) == "running"
    answer = act(client, "o1", "signal", name="ship", payload='{"carrier": NaN}')
    assert text(answer, "outcome") == (
        "400 InvalidArgumentError: payload: is not valid JSON (NaN is not a JSON value)"
    )
    answer = act(client, "o1", "signal", name="", payload="")  # the API's own check
    assert text(answer, "outcome").startswith("400 InvalidArgumentError: name")
    description = engine.describe("o1")
    assert description.status == "running"
    assert client.get("/runs/o1").get_data(as_text=True).count("run-buffered-signals") == 0


def test_an_update_shows_its_result_and_a_validator_refusal(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("approval", APPROVAL, id="a1")
    answer = act(client, "a1", "update", name="comment", payload='{"by": "ada", "text": "hi"}')
    assert text(answer, "outcome") == "update comment answered"
    assert text(answer, "action-answer") == "1"  # the update's result: comments so far
    answer = act(client, "a1", "update", name="comment", payload='{"by": "ada", "text": " "}')
    assert text(answer, "outcome").startswith("400 UpdateValidationError:")
    assert "'text' must not be empty" in text(answer, "outcome")
    assert find(answer, "action-answer") == []


def test_a_query_shows_its_answer_or_the_api_refusal(client: FlaskClient, engine: Engine) -> None:
    engine.start("approval", APPROVAL, id="a1")
    answer = act(client, "a1", "query", name="status", arg="")
    assert text(answer, "outcome") == "query status answered"
    assert '"stage": "awaiting-approver"' in text(answer, "action-answer")
    answer = act(client, "a1", "query", name="nope", arg="")
    assert text(answer, "outcome").startswith("400 UnknownQueryError:")


def test_query_is_offered_only_where_the_console_drives(
    engine: Engine, clock: VirtualClock
) -> None:
    del clock
    engine.start("approval", APPROVAL, id="a1")
    app = create_app(Console(engine, "t", drives=False), config={"TESTING": True})
    html = app.test_client().get("/runs/a1").get_data(as_text=True)
    assert find(html, "query-form") == [] and len(find(html, "signal-form")) == 1


def test_cancel_suspend_and_resume(client: FlaskClient, engine: Engine) -> None:
    engine.start("reminder", REMINDER, id="r1")
    engine.start("approval", APPROVAL, id="a1")
    answer = act(client, "a1", "suspend")
    assert (text(answer, "outcome"), refreshed_status(answer)) == (
        "suspend: done; the run is suspended",
        "suspended",
    )
    answer = act(client, "a1", "resume")
    assert refreshed_status(answer) == "running"
    answer = act(client, "r1", "cancel")
    assert text(answer, "outcome") == "cancel: done; the run is cancelled"
    assert refreshed_status(answer) == "cancelled"
    answer = act(client, "r1", "resume")
    assert text(answer, "outcome").startswith("409 WorkflowNotRunningError:")


@pytest.mark.parametrize(
    ("action", "status", "code"),
    [("retry", 400, "InvalidArgumentError"), ("cancel", 409, "WorkflowNotRunningError")],
)
def test_a_completed_run_refuses(
    client: FlaskClient, engine: Engine, action: str, status: int, code: str
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    engine.signal("o1", "ship", None)
    answer = act(client, "o1", action)
    outcome = find(answer, "outcome")[0]
    assert outcome.attrs["role"] == "alert"
    assert outcome.text.startswith(f"{status} {code}: workflow 'o1' is completed")
    assert refreshed_status(answer) == "completed"


def test_retry_of_a_failed_run_runs_its_failed_step_again(
    client: FlaskClient, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    engine.start("order", {**SAMPLE_ORDER, "card_last4": "0000"}, id="declined")
    assert engine.describe("declined").status == "failed"
    answer = act(client, "declined", "retry")
    # The console's engine drives: the charge ran again at once, and was declined again.
    assert text(answer, "outcome") == "retry: done; the run is failed"
    declines = [r for r in caplog.records if "'charge_payment' failed on attempt" in r.message]
    assert [r.__dict__["attempt"] for r in declines] == [1, 2]  # numbered on after a retry


def test_purge_refuses_a_running_run_and_deletes_a_finished_one(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    answer = act(client, "o1", "purge")
    assert text(answer, "outcome").startswith("400 InvalidArgumentError:")
    engine.signal("o1", "ship", None)
    answer = act(client, "o1", "purge")
    assert text(answer, "outcome") == "purged: the run and its history are gone"
    assert len(find(answer, "run-gone")) == 1
    assert client.get("/runs/o1").status_code == 404


def test_an_action_on_an_unknown_run_or_an_unknown_action(client: FlaskClient) -> None:
    answer = act(client, "ghost", "cancel")
    assert text(answer, "outcome").startswith("404 WorkflowNotFoundError:")
    assert client.post("/runs/ghost/act/explode", headers=HTMX).status_code == 404


def test_a_cross_site_post_is_refused_before_anything_is_done(
    client: FlaskClient, engine: Engine
) -> None:
    """A form another site makes the browser post carries no HX-Request header."""
    engine.start("reminder", REMINDER, id="r1")
    response = client.post("/runs/r1/act/cancel", headers={"Origin": "https://evil.example"})
    assert response.status_code == 403
    assert engine.describe("r1").status == "running"


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("signal", {"name": "ship", "payload": "{}"}),
        ("update", {"name": "comment", "payload": "{}"}),
        ("query", {"name": "status", "arg": ""}),
        ("cancel", {}),
        ("purge", {}),
    ],
)
def test_read_only_hides_and_refuses_every_action(
    make_app: Callable[..., Flask], engine: Engine, action: str, form: dict[str, Any]
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    client = make_app(read_only=True).test_client()
    html = client.get("/runs/o1").get_data(as_text=True)
    assert find(html, "actions") == [] and 'hx-post="' not in html
    answer = act(client, "o1", action, **form)
    assert text(answer, "outcome") == (
        "403 ReadOnlyConsoleError: this console is read-only (--read-only)"
    )
    assert engine.describe("o1").status == "running"
    assert texts(answer, "run-status") == ["running"]
