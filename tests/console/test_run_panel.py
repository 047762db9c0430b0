"""The run page's actions panel: it offers what the API accepts at the run's status, says
what a parked run waits for with its forms filled, warns on a signal the run does not wait
for, and is drawn again only when what it offers changes (so a payload being typed stays)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from flask.testing import FlaskClient
from run_html import find, text, texts

from examples.approval import SAMPLE_INPUT as APPROVAL
from examples.workflows import workflows as example_workflows
from weft_serverless import Engine, RetryPolicy, WorkflowContext, WorkflowDefinition, workflow
from weft_serverless.console.app import Console, create_app
from weft_serverless.console.run_actions import OFFERED
from weft_serverless.testing import VirtualClock

HTMX = {"HX-Request": "true"}
ACTIONS = ("signal", "update", "query", "suspend", "resume", "retry", "cancel", "purge")
FORMS = {
    "signal": {"name": "go", "payload": "{}"},
    "update": {"name": "note", "payload": '"hello"'},
    "query": {"name": "stage", "arg": ""},
}
"""A valid form for each action with fields: the names the desk workflow answers."""
NO_OPS = {("pending", "resume"), ("running", "resume"), ("suspended", "suspend")}
NO_OPS |= {("cancelled", "cancel")}
"""Actions the API answers 200 while doing nothing; the panel leaves them out."""


def _finish(spec: str) -> str:
    if spec == "fail":
        raise RuntimeError("the desk is closed")
    return "done"


def _desk(ctx: WorkflowContext, spec: str) -> Generator[Any, Any, str]:
    ctx.on_query("stage", lambda _: "waiting")
    ctx.on_update("note", lambda note: note)
    yield ctx.wait_for_signal("go")
    return (yield ctx.run("finish", spec, retry=RetryPolicy(max_attempts=1)))


def _nap(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.sleep("1h")


@pytest.fixture
def registry() -> dict[str, WorkflowDefinition]:
    desk = workflow("desk").activities(finish=_finish).execute(_desk)
    return {**example_workflows, "desk": desk, "nap": workflow("nap").execute(_nap)}


def _run_at(engine: Engine, clock: VirtualClock, status: str, workflow_id: str) -> None:
    """A desk run ``workflow_id`` at ``status``."""
    if status == "pending":
        engine.start("desk", "ok", id=workflow_id, start_after=3600)
    elif status == "timed-out":
        engine.start("desk", "ok", id=workflow_id, execution_timeout=1)
        clock.advance(2)
        engine.run_maintenance()
    else:
        engine.start("desk", "fail" if status == "failed" else "ok", id=workflow_id)
        if status == "suspended":
            engine.suspend(workflow_id)
        elif status == "cancelled":
            engine.cancel(workflow_id)
        elif status in ("completed", "failed"):
            engine.signal(workflow_id, "go")
    assert engine.describe(workflow_id).status == status


def _offered(html: str) -> tuple[str, ...]:
    return tuple(
        action
        for action in ACTIONS
        if find(html, f"{action}-form") or find(html, f"action-{action}")
    )


def _act(client: FlaskClient, workflow_id: str, action: str, **form: str) -> str:
    answer = client.post(f"/runs/{workflow_id}/act/{action}", data=form, headers=HTMX)
    assert answer.status_code == 200
    return answer.get_data(as_text=True)


@pytest.mark.parametrize("status", list(OFFERED))
def test_each_status_offers_exactly_what_the_api_carries_out(
    client: FlaskClient, engine: Engine, clock: VirtualClock, status: str
) -> None:
    """Each action offered succeeds; each one left out is refused, or a no-op."""
    _run_at(engine, clock, status, "shown")
    assert _offered(client.get("/runs/shown").get_data(as_text=True)) == OFFERED[status]
    for action in ACTIONS:
        workflow_id = f"{status}-{action}"
        _run_at(engine, clock, status, workflow_id)
        outcome = find(_act(client, workflow_id, action, **FORMS.get(action, {})), "outcome")[0]
        succeeded = outcome.attrs["role"] == "status"
        if action in OFFERED[status]:
            assert succeeded, (action, outcome.text)
        elif succeeded:
            assert (status, action) in NO_OPS, (action, outcome.text)
            assert engine.describe(workflow_id).status == status


def test_without_the_code_a_finished_run_offers_purge_alone(
    engine: Engine, clock: VirtualClock
) -> None:
    _run_at(engine, clock, "completed", "c1")
    app = create_app(Console(engine, "t", drives=False), config={"TESTING": True})
    html = app.test_client().get("/runs/c1").get_data(as_text=True)
    assert _offered(html) == ("purge",)  # no query without the code
    assert find(html, "signal-form") == [] and find(html, "run-waits") == []


def test_a_parked_run_says_what_it_waits_for_and_fills_the_forms(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("approval", APPROVAL, id="a1")
    html = client.get("/runs/a1").get_data(as_text=True)
    assert texts(html, "run-wait") == [
        "signal approve",
        "signal reject",
        "update comment",
        "query status",
    ]
    name = find(html, "signal-name")[0].attrs
    assert (name["value"], name["data-waits"]) == ("approve", '["approve", "reject"]')
    assert texts(html, "signal-wait") == ["approve", "reject"]
    assert find(html, "update-name")[0].attrs["value"] == "comment"
    assert find(html, "query-name")[0].attrs["value"] == "status"


def test_a_run_parked_on_an_activity_or_a_timer_waits_for_nothing_from_outside(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("nap", None, id="n1")
    html = client.get("/runs/n1").get_data(as_text=True)
    assert text(html, "run-waits") == "no signal, update or query: its step goes on by itself"
    name = find(html, "signal-name")[0].attrs
    assert (name["value"], name["data-waits"]) == ("", "[]")


def test_a_signal_the_run_does_not_wait_for_is_sent_with_a_warning(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("approval", APPROVAL, id="a1")
    answer = _act(client, "a1", "signal", name="aprove", payload="")
    assert text(answer, "outcome") == "signal sent; the run is running"
    assert text(answer, "outcome-warning") == (
        "Note: the run does not wait for signal 'aprove' now (it waits for approve, reject); "
        "the signal is kept until the run waits for it, which may be never."
    )
    answer = _act(client, "a1", "signal", name="approve", payload='{"by": "grace"}')
    assert find(answer, "outcome-warning") == []
    assert text(answer, "outcome") == "signal sent; the run is completed"


def test_the_panel_is_drawn_again_only_when_what_it_offers_changes(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("approval", APPROVAL, id="a1")
    html = client.get("/runs/a1").get_data(as_text=True)
    key = find(html, "action-forms")[0].attrs["data-panel"]
    unchanged = client.get(f"/runs/a1/section?shown={key}").get_data(as_text=True)
    assert find(unchanged, "action-forms") == []  # the operator's typing is left alone
    update = {"name": "comment", "payload": '{"by": "a", "text": "b"}', "shown": key}
    answer = _act(client, "a1", "update", **update)  # the page's forms post their key
    assert find(answer, "action-forms") == []
    answer = _act(client, "a1", "suspend", shown=key)
    panel = find(answer, "action-forms")
    assert len(panel) == 1 and panel[0].attrs["hx-swap-oob"] == "true"
    assert _offered(answer) == OFFERED["suspended"]
    engine.resume("a1")
    engine.signal("a1", "approve", {"by": "grace"})
    later = client.get(f"/runs/a1/section?shown={key}").get_data(as_text=True)
    assert _offered(later) == OFFERED["completed"]
    assert find(later, "action-forms")[0].attrs["hx-swap-oob"] == "true"


def test_a_query_is_offered_only_where_the_runs_code_answers_one(
    client: FlaskClient, engine: Engine
) -> None:
    from examples.order import SAMPLE_ORDER

    engine.start("order", SAMPLE_ORDER, id="o1")  # the order registers no query
    assert _offered(client.get("/runs/o1").get_data(as_text=True)) == (
        "signal",
        "update",
        "suspend",
        "cancel",
    )
    engine.signal("o1", "ship", None)
    assert _offered(client.get("/runs/o1").get_data(as_text=True)) == ("purge",)
