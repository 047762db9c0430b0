"""``weft dev`` over a long session: its memory follows what its table holds, and SIGTERM
stops it within seconds whatever it is doing.

Both run ``weft dev`` as a user does (a subprocess on a free port). The memory figure is the
process's resident set (``/proc/PID/status``, as on the Linux machines the suite runs on).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from test_dev_server import DevProcess, call, poll

BIG_FLOWS = """
from weft_serverless import workflow


def measure(value):
    return len(value)


def sized(ctx, value):
    return (yield ctx.run("measure", value))


workflows = {"sized": workflow("sized").activities(measure=measure).execute(sized)}
"""

STUCK_FLOWS = """
import threading

from weft_serverless import workflow

never = threading.Event()


def stuck(_):
    print("stuck activity started", flush=True)
    never.wait(120)  # a call that hangs, as a slow endpoint does


def napper(ctx, _):
    yield ctx.sleep("100ms")  # so the maintenance ticker, not the request, drives what follows
    yield ctx.run("stuck", None)


workflows = {"napper": workflow("napper").activities(stuck=stuck).execute(napper)}
"""

INPUT_BYTES = 200_000
WARM_STARTS, MEASURED_STARTS = 10, 60
MAX_GROWTH_PER_START = 2.5 * 2**20
"""Bytes of resident memory one start of a 200 KB input may add: the table keeps about twice
the input (the run's state and its start event). moto's whole-table copies added 4.4 MB."""
STOP_SECONDS = 10.0
"""The stuck activity hangs for 120 s: stopping well under that proves stop does not wait for
it. The bound leaves room for a busy machine (a stop took 5 s at a load of 10 on 2 cores);
``bench/dev_server.py`` prints the quiet figure (1.5 to 2 s, ``STOP_WAIT_SECONDS`` and exit)."""


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def test_memory_grows_with_the_table_not_with_each_commit(tmp_path: Path) -> None:
    (tmp_path / "big_flows.py").write_text(BIG_FLOWS)
    dev = DevProcess(tmp_path, "--workflows", "big_flows")
    try:
        base = dev.wait_for_url()
        value = "x" * INPUT_BYTES

        def start(index: int) -> None:
            body = {"workflow_type": "sized", "id": f"big-{index}", "input": value}
            status, answer = call(f"{base}/workflows", "POST", body, timeout=60)
            assert (status, answer["status"]) == (201, "completed"), answer

        for index in range(WARM_STARTS):
            start(index)
        before = resident_bytes(dev.process.pid)
        for index in range(WARM_STARTS, WARM_STARTS + MEASURED_STARTS):
            start(index)
        growth = (resident_bytes(dev.process.pid) - before) / MEASURED_STARTS
    finally:
        assert dev.stop() == 0, "".join(dev.output)
    assert growth < MAX_GROWTH_PER_START, f"{growth / 2**20:.2f} MiB per start"


def test_sigterm_stops_it_within_seconds_while_maintenance_is_stuck_in_an_activity(
    tmp_path: Path,
) -> None:
    """The ticker drives a run whose activity hangs: the process stops anyway (everything is
    in memory, so nothing is lost that a clean wait would keep)."""
    (tmp_path / "stuck_flows.py").write_text(STUCK_FLOWS)
    dev = DevProcess(tmp_path, "--workflows", "stuck_flows")
    try:
        base = dev.wait_for_url()
        body = {"workflow_type": "napper", "id": "stuck-1", "input": None}
        assert call(f"{base}/workflows", "POST", body)[0] == 201
        poll(lambda: "stuck activity started" in "".join(dev.output), "the stuck activity")
        began = time.monotonic()
        dev.process.send_signal(signal.SIGTERM)
        status = dev.process.wait(timeout=30)
        took = time.monotonic() - began
    finally:
        if dev.process.poll() is None:
            dev.process.kill()
            dev.process.wait(timeout=10)
    output = "".join(dev.output)
    assert status == 0, output
    assert took < STOP_SECONDS, f"took {took:.1f} s to stop:\n{output}"
    assert "weft dev stopped" in output and "Traceback" not in output
