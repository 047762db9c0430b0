"""Starting a run from the console: the start_workflow route's rules, a JSON input, samples."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask
from flask.testing import FlaskClient

from examples.workflows import SAMPLES
from weft_serverless import Engine

MakeApp = Callable[..., Flask]
HTMX = {"HX-Request": "true"}


def test_a_start_drives_the_run_and_redirects_to_its_page(
    client: FlaskClient, engine: Engine
) -> None:
    answer = client.post(
        "/start",
        data={
            "workflow_type": "order",
            "id": "from-console",
            "tags": "vip, web",
            "input": '{"order_id": "o-1", "sku": "s", "quantity": 1, "amount_cents": 100, '
            '"card_last4": "4242", "email": "a@b.c"}',
        },
        headers=HTMX,
    )
    assert answer.status_code == 204
    assert answer.headers["HX-Redirect"] == "/runs/from-console"
    described = engine.describe("from-console")
    assert described.status == "running"  # driven here up to its wait for the ship signal
    assert engine.list(tags=["vip", "web"])[0].id == "from-console"


def test_refusals_are_the_apis(client: FlaskClient, engine: Engine) -> None:
    not_json = client.post(
        "/start", data={"workflow_type": "order", "input": "{oops"}, headers=HTMX
    )
    assert not_json.status_code == 400
    assert b"input: is not JSON" in not_json.data

    unknown = client.post("/start", data={"workflow_type": "nope", "input": ""}, headers=HTMX)
    assert unknown.status_code == 400
    assert b"UnknownWorkflowTypeError" in unknown.data

    bad_id = client.post("/start", data={"workflow_type": "order", "id": "a\tb"}, headers=HTMX)
    assert bad_id.status_code == 400
    assert engine.list() == []


def test_the_form_offers_the_registry_with_samples(make_app: MakeApp) -> None:
    page = make_app(samples=SAMPLES).test_client().get("/").get_data(as_text=True)
    assert 'data-testid="start"' in page
    assert '<option value="order">order</option>' in page
    assert '<option value="order_saga">order_saga</option>' in page
    assert '"order_id"' in page  # the samples the type picker fills the input from


def test_hidden_and_refused_without_workflows_or_in_read_only(make_app: MakeApp) -> None:
    read_only = make_app(read_only=True).test_client()
    assert 'data-testid="start"' not in read_only.get("/").get_data(as_text=True)
    refused = read_only.post("/start", data={"workflow_type": "order"}, headers=HTMX)
    assert refused.status_code == 403
    assert b"ReadOnlyConsoleError" in refused.data


def test_every_post_of_another_site_is_refused_before_anything_is_done(
    client: FlaskClient, engine: Engine
) -> None:
    """A form another site makes the browser post carries no HX-Request header."""
    for path in ("/start", "/schedules/nightly/pause", "/runs/r1/act/cancel"):
        refused = client.post(path, data={"workflow_type": "order"})
        assert refused.status_code == 403, path
    assert engine.list() == []
