"""``weft dev`` fires a due timer from its hint, not at the next maintenance tick (ADR 0054).

The ticker is set to ten minutes, so only the in-process hint path can wake the run. This is
the one real-time check of the path: a 1 s sleep through the real server (in this process,
so it runs this checkout), answered by the start request's own bounded wait.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dev_server import call

from weft_serverless.aws import reset_engine
from weft_serverless.devserver import DevConfig, DevServer

NAP_FLOWS = """
from weft_serverless import workflow


def napper(ctx, seconds):
    yield ctx.sleep(seconds)
    return "rested"


workflows = {"napper": workflow("napper").execute(napper)}
"""


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DevServer]:
    (tmp_path / "nap_flows.py").write_text(NAP_FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = dict(os.environ)
    server = DevServer(DevConfig(port=0, workflows="nap_flows", tick=600), out=sys.stderr)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        reset_engine(close=True)
        os.environ.clear()
        os.environ.update(saved)
        sys.modules.pop("nap_flows", None)


def test_a_one_second_sleep_wakes_in_about_a_second_with_no_maintenance_tick(
    dev: DevServer,
) -> None:
    started = time.monotonic()
    body = {"workflow_type": "napper", "id": "nap-1", "input": 1.0, "wait_seconds": 8}
    status, reply = call(f"{dev.url}/workflows", "POST", body, timeout=15)
    elapsed = time.monotonic() - started
    assert status == 201, reply
    assert reply["status"] == "completed", reply
    assert 1.0 <= elapsed < 4.0, elapsed  # a ten-minute tick could not have done it
    assert dev.timer_hints is not None and dev.timer_hints.pending() == 0
