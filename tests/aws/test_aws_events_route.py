"""``GET /workflows/{id}/events``: the run's event log over the API, paged with ``after``."""

from __future__ import annotations

from aws_support import Api


def test_events_route_pages_through_the_log(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "input": "ada", "id": "g-1"})
    whole = api("GET", "/workflows/g-1/events")
    assert whole.status == 200
    types = [item["type"] for item in whole.body["items"]]
    assert types[0] == "run.started" and types[-1] == "run.completed"
    assert "step.completed" in types
    assert whole.body["next_after"] is None

    seen: list[dict[str, object]] = []
    query = {"limit": "1"}
    while True:
        page = api("GET", "/workflows/g-1/events", query=query)
        assert page.status == 200
        seen += page.body["items"]
        if page.body["next_after"] is None:
            break
        query = {"limit": "1", "after": page.body["next_after"]}
    assert seen == whole.body["items"]


def test_events_route_errors(api: Api) -> None:
    assert api("GET", "/workflows/nope/events").status == 404
    api("POST", "/workflows", {"workflow_type": "greeter", "input": "ada", "id": "g-1"})
    assert api("GET", "/workflows/g-1/events", query={"limit": "0"}).status == 400
