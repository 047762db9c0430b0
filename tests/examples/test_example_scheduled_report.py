"""examples/scheduled_report.py end to end: the maintenance tick fires a nightly cron
schedule in Berlin time, once per night, and an outage runs only the latest night."""

from __future__ import annotations

import pytest
from example_support import Stack, effects

from examples.scheduled_report import SCHEDULE_ID, ensure_schedule

HOUR, DAY = 3600.0, 86400.0


def test_the_schedule_starts_one_report_per_night_at_two_in_berlin(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the schedule, created at 2026-01-01T00:00Z (01:00 in Berlin), and created again
    schedule = ensure_schedule(stack.engine)
    assert ensure_schedule(stack.engine).describe() == schedule.describe()

    # WHEN the tick runs before 02:00 Berlin THEN nothing starts; at 02:00 (01:00Z) one run
    stack.maintain(advance=HOUR - 60)
    assert effects(capsys.readouterr().out) == []
    stack.maintain(advance=60)
    run = f"{SCHEDULE_ID}-20260101T010000Z"
    assert effects(capsys.readouterr().out) == [f"[report]    {run} for eu"]
    assert stack.result(run).body["result"] == {"region": "eu", "report_id": run, "rows": 42}

    # WHEN the ticks stop for three nights and resume 10 minutes after the third
    stack.maintain(advance=3 * DAY + 600)

    # THEN only the latest night runs; the two before it are counted as missed
    assert effects(capsys.readouterr().out) == [
        f"[report]    {SCHEDULE_ID}-20260104T010000Z for eu"
    ]
    described = schedule.describe()
    assert (described.fired, described.missed, described.skipped) == (2, 2, 0)
    assert described.next_fire_at == stack.clock() - 600 + DAY
