"""examples/approval.py end to end: API signals, queries and updates; timers by maintenance."""

from __future__ import annotations

import pytest
from example_support import Stack, effects

from examples.approval import SAMPLE_INPUT

REQUEST = {**SAMPLE_INPUT, "approver_timeout": "1h", "manager_timeout": "1d"}


def test_the_approver_approves_with_a_comment_on_record(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a request waiting for its approver
    assert stack.start("approval", "exp-7", REQUEST).body["status"] == "running"
    status = stack.call("POST", "/workflows/exp-7/queries/status")
    assert status.body["result"] == {
        "stage": "awaiting-approver",
        "waiting_for": "grace",
        "comments": [],
    }

    # WHEN the requester comments (an update) and the approver approves (a signal)
    comment = {"payload": {"by": "ada", "text": "  cheaper if booked early "}}
    updated = stack.call("POST", "/workflows/exp-7/updates/comment", comment)
    assert (updated.status, updated.body["result"]) == (200, 1)
    signalled = stack.call("POST", "/workflows/exp-7/signals/approve", {"payload": {"by": "grace"}})

    # THEN the signal drives the run to its end inside the same request
    assert (signalled.status, signalled.body["status"]) == (200, "completed")
    assert stack.result("exp-7").body["result"] == {
        "request_id": "exp-7",
        "decision": "approved",
        "decided_by": "grace",
        "escalated": False,
        "comments": [{"by": "ada", "text": "cheaper if booked early"}],
    }
    assert effects(capsys.readouterr().out)[1:] == [
        "[expenses]  exp-7: approved",
        "[notify]    to ada: your request exp-7 is approved",
    ]


def test_an_empty_comment_is_refused_naming_each_field(stack: Stack) -> None:
    stack.start("approval", "exp-8", {**REQUEST, "request_id": "exp-8"})

    refused = stack.call("POST", "/workflows/exp-8/updates/comment", {"payload": {"text": " "}})

    assert refused.status == 400
    assert refused.body["code"] == "UpdateValidationError"
    assert [issue["path"] for issue in refused.body["issues"]] == [["by"], ["text"]]
    status = stack.call("POST", "/workflows/exp-8/queries/status")
    assert status.body["result"]["comments"] == []


def test_a_refused_update_does_not_delay_the_next_signal(stack: Stack) -> None:
    # A validator's refusal once left the run claimed by an engine that had forgotten it,
    # so the next signal was only buffered until that orphan claim expired (40 s).
    stack.start("approval", "exp-9", {**REQUEST, "request_id": "exp-9"})
    refused = stack.call("POST", "/workflows/exp-9/updates/comment", {"payload": {"text": ""}})
    assert refused.status == 400

    signalled = stack.call("POST", "/workflows/exp-9/signals/approve", {"payload": {"by": "g"}})

    assert signalled.body["status"] == "completed"


def test_silence_escalates_to_the_manager_then_expires(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a request nobody answers
    stack.start("approval", "exp-10", {**REQUEST, "request_id": "exp-10"})

    # WHEN the approver's hour passes (the schedule calls maintenance)
    assert stack.maintain(advance=3599)["timers_fired"] == 0
    assert stack.maintain(advance=2)["timers_fired"] == 1

    # THEN the manager is asked, and the query says so
    status = stack.call("POST", "/workflows/exp-10/queries/status").body["result"]
    assert (status["stage"], status["waiting_for"]) == ("escalated", "alan")
    assert "[notify]    to alan: no answer from grace; ada asks approval" in capsys.readouterr().out

    # WHEN the manager's day passes too THEN the request expires
    stack.maintain(advance=86401)
    result = stack.result("exp-10")
    assert result.status == 200
    assert result.body["result"]["decision"] == "expired"
    assert result.body["result"]["escalated"] is True


def test_the_manager_can_reject_after_escalation(stack: Stack) -> None:
    stack.start("approval", "exp-11", {**REQUEST, "request_id": "exp-11"})
    stack.maintain(advance=3601)

    stack.call("POST", "/workflows/exp-11/signals/reject", {"payload": {"by": "alan"}})

    outcome = stack.result("exp-11").body["result"]
    assert (outcome["decision"], outcome["decided_by"], outcome["escalated"]) == (
        "rejected",
        "alan",
        True,
    )
