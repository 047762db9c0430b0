"""examples/reminder.py end to end: a far timer, repeats, and an acknowledging signal."""

from __future__ import annotations

import datetime as dt

import pytest
from example_support import Stack, effects

from examples.reminder import SAMPLE_INPUT

DAY = 86400.0


def test_a_reminder_waits_for_its_due_time_then_repeats_until_acknowledged(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a reminder due in a week, repeated daily up to three times
    due = stack.clock() + 7 * DAY
    request = {**SAMPLE_INPUT, "due_at": due, "every": "1d"}
    request.pop("delay")
    assert stack.start("reminder", "rem-1", request).body["status"] == "running"

    # WHEN maintenance runs before the due time THEN nothing is sent
    stack.maintain(advance=7 * DAY - 1)
    assert effects(capsys.readouterr().out) == []
    assert stack.call("POST", "/workflows/rem-1/queries/status").body["result"]["sent"] == 0

    # WHEN the due time passes THEN the first reminder goes out; a day later the second
    stack.maintain(advance=1)
    stack.maintain(advance=DAY)
    assert effects(capsys.readouterr().out) == [
        "[reminder]  #1 to ada@example.com: renew the domain",
        "[reminder]  #2 to ada@example.com: renew the domain",
    ]

    # WHEN the user acknowledges THEN the series ends early
    ack = stack.call("POST", "/workflows/rem-1/signals/acknowledge", {"payload": {"by": "ada"}})
    assert ack.body["status"] == "completed"
    assert stack.result("rem-1").body["result"] == {
        "reminder_id": "rem-1",
        "stage": "done",
        "sent": 2,
        "acknowledged_by": "ada",
    }


def test_an_iso_due_time_and_the_last_repeat_end_the_run(stack: Stack) -> None:
    due = dt.datetime.fromtimestamp(stack.clock() + 3600, dt.UTC).isoformat()
    request = {**SAMPLE_INPUT, "reminder_id": "rem-2", "due_at": due, "repeat": 2, "every": "1h"}
    stack.start("reminder", "rem-2", request)

    stack.maintain(advance=3600)
    stack.maintain(advance=3600)

    result = stack.result("rem-2").body["result"]
    assert (result["sent"], result["acknowledged_by"]) == (2, None)


def test_a_due_time_without_a_zone_fails_the_run_with_a_reason(stack: Stack) -> None:
    request = {**SAMPLE_INPUT, "reminder_id": "rem-3", "due_at": "2026-01-02T09:00:00"}

    reply = stack.start("reminder", "rem-3", request)

    assert reply.body["status"] == "failed"
    assert "ISO 8601 time with a zone" in reply.body["error"]["message"]
