"""GET /workflows?counts=status: a page of runs and the count of each status under the same
filters but the status, from one read of the index (what a console refresh asks for)."""

from __future__ import annotations

from aws_support import Api


def test_a_page_comes_with_its_status_counts_when_asked(api: Api) -> None:
    for n in range(3):
        api("POST", "/workflows", {"workflow_type": "approval", "id": f"a-{n}", "input": {}})
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g-0", "input": "ada"})
    plain = api("GET", "/workflows?status=running&limit=2").body
    assert "counts" not in plain
    page = api("GET", "/workflows?status=running&limit=2&counts=status").body
    assert [item["id"] for item in page["items"]] == ["a-0", "a-1"]
    assert page["next_cursor"] == plain["next_cursor"]
    assert page["counts"] == [{"value": "running", "count": 3}, {"value": "completed", "count": 1}]
    counted = api("GET", "/workflow-counts?group_by=status").body["counts"]
    assert counted == page["counts"]
    refused = api("GET", "/workflows?counts=type")
    assert refused.status == 400 and refused.body["field"] == "counts"
