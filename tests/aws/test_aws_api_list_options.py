"""GET /workflows options the console asks for: ``counts=status`` (a page of runs and the
count of each status under the same filters but the status, from one read of the index) and
``type_prefix`` (types starting with what the operator typed)."""

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


def test_a_type_prefix_lists_and_counts_every_type_it_starts(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "approval", "id": "a-0", "input": {}})
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g-0", "input": "ada"})
    api("POST", "/workflows", {"workflow_type": "guarded", "id": "u-0", "input": "o-1"})
    listed = api("GET", "/workflows?type_prefix=g").body["items"]
    assert [(row["id"], row["workflow_type"]) for row in listed] == [
        ("g-0", "greeter"),
        ("u-0", "guarded"),
    ]
    counted = api("GET", "/workflow-counts?group_by=workflow_type&type_prefix=gu").body
    assert counted["counts"] == [{"value": "guarded", "count": 1}]
    refused = api("GET", "/workflows?type_prefix=")
    assert refused.status == 400 and refused.body["field"] == "type_prefix"
