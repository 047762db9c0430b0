"""The HTTP API finds runs by search attribute, tag and start time, pages them and counts
them (``GET /workflows`` filters, ``GET /workflow-counts``), on DynamoDB (moto)."""

from __future__ import annotations

import json

from aws_support import Api

from weft_serverless.testing import VirtualClock


def _start(api: Api, workflow_id: str, customer: str, amount: float, tags: list[str]) -> None:
    reply = api(
        "POST",
        "/workflows",
        {
            "workflow_type": "approval",
            "id": workflow_id,
            "search_attributes": {"customer": customer, "amount": amount},
            "tags": tags,
        },
    )
    assert reply.status == 201, reply.body


def test_list_filters_page_and_count(api: Api, clock: VirtualClock) -> None:
    for n, (customer, amount, tags) in enumerate(
        [("c-7", 50.0, []), ("c-7", 150.0, ["vip"]), ("c-8", 500.0, ["vip"]), ("c-7", 900, ["vip"])]
    ):
        clock.advance(1)
        _start(api, f"o{n}", customer, amount, tags)
    where = json.dumps({"customer": "c-7", "amount": [">=", 100]})
    query = {"where": where, "tags": "vip", "order": "newest", "limit": "1"}
    first = api("GET", "/workflows", query=query)
    assert first.status == 200, first.body
    assert [i["id"] for i in first.body["items"]] == ["o3"]
    assert first.body["items"][0]["search_attributes"] == {"customer": "c-7", "amount": 900.0}
    assert first.body["items"][0]["tags"] == ["vip"]
    second = api("GET", "/workflows", query={**query, "cursor": first.body["next_cursor"]})
    assert [i["id"] for i in second.body["items"]] == ["o1"]
    assert second.body["next_cursor"] is None
    prefixed = api("GET", "/workflows", query={"id_prefix": "o", "started_after": "0"})
    assert len(prefixed.body["items"]) == 4
    counts = api("GET", "/workflow-counts", query={"group_by": "customer", "tags": "vip"})
    assert counts.status == 200, counts.body
    assert counts.body == {
        "group_by": "customer",
        "counts": [{"value": "c-7", "count": 2}, {"value": "c-8", "count": 1}],
    }


def test_bad_filters_and_attributes_are_400s(api: Api) -> None:
    reply = api("GET", "/workflows", query={"where": "{not json"})
    assert (reply.status, reply.code) == (400, "InvalidFilterError")
    reply = api("GET", "/workflows", query={"where": json.dumps({"amount": ["~", 1]})})
    assert (reply.status, reply.code) == (400, "InvalidFilterError")
    reply = api(
        "POST",
        "/workflows",
        {"workflow_type": "approval", "id": "x", "search_attributes": {"amount": "lots"}},
    )
    assert (reply.status, reply.code) == (400, "SearchAttributeError")
    reply = api("POST", "/workflows", {"workflow_type": "approval", "id": "y", "tags": ["a b"]})
    assert (reply.status, reply.code) == (400, "InvalidTagError")
    assert api("GET", "/workflows/x").status == 404
