"""``weft dev`` shows run events: the events route over HTTP, and every event its
maintenance ticker published to the bus on the local moto server, printed as it goes."""

from __future__ import annotations

import time
from pathlib import Path

from test_dev_server import FLAKY_FLOWS, DevProcess, call, poll


def test_weft_dev_prints_published_events_and_serves_the_log(tmp_path: Path) -> None:
    (tmp_path / "event_flows.py").write_text(FLAKY_FLOWS)
    dev = DevProcess(tmp_path, "--workflows", "event_flows")
    try:
        base = dev.wait_for_url()
        body = {"workflow_type": "greet", "id": "g-1", "input": "ada", "wait_seconds": 10}
        status, started = call(f"{base}/workflows", "POST", body, timeout=20)
        assert (status, started["status"]) == (201, "completed")
        status, log = call(f"{base}/workflows/g-1/events")
        assert status == 200
        types = [item["type"] for item in log["items"]]
        assert types[0] == "run.started" and types[-1] == "run.completed"
        assert "activity.attempt_failed" in types
        printed = f"event run.completed g-1 ({log['items'][-1]['event_id']})"
        try:
            poll(lambda: printed in "".join(dev.output), "the published terminal event")
        except AssertionError:
            print("".join(dev.output))
            raise
        time.sleep(0.5)  # a few more ticks: nothing is published twice
    finally:
        assert dev.stop() == 0, "".join(dev.output)
    output = "".join(dev.output)
    assert "Traceback" not in output
    assert output.count(printed) == 1
    assert "event activity.attempt_failed g-1 (" in output
