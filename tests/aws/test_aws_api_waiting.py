"""GET /workflows/{id} says what a parked run waits for: found by a read-only replay, since
a signal wait without a timeout leaves no record and handlers live in the code."""

from __future__ import annotations

from aws_support import Api


def test_describe_says_which_signals_updates_and_queries_a_parked_run_answers(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "approval", "id": "a-1", "input": {"n": 1}})
    waiting = api("GET", "/workflows/a-1").body["waiting_for"]
    assert waiting == {"signals": ["approve"], "updates": ["add", "explode"], "queries": ["items"]}
    suspended = api("POST", "/workflows/a-1/suspend", {}).body
    assert suspended["status"] == "suspended" and suspended["waiting_for"] == waiting


def test_a_run_without_a_timeout_on_its_wait_is_known_too(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "guarded", "id": "l-1", "input": "o-1"})
    waiting = api("GET", "/workflows/l-1").body["waiting_for"]
    assert waiting == {"signals": ["go"], "updates": [], "queries": []}


def test_a_finished_or_delayed_run_waits_for_nothing(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g-1", "input": "ada"})
    assert api("GET", "/workflows/g-1").body["waiting_for"] is None
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "g-2", "start_after": "1m"})
    assert api("GET", "/workflows/g-2").body["waiting_for"] is None
