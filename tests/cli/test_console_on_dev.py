"""A newcomer's path: ``weft dev`` in one shell, the ``weft console`` line its banner prints in
another, and the console showing what runs on the dev server's table and signalling it on.

Both are real subprocesses talking over loopback HTTP: weft dev's moto DynamoDB, its API, and
the console's own server.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dev_server import ChildProcess, DevProcess, call, newcomer_environment, poll

CONSOLE_LINE = re.compile(r"^\s*(\S*weft console .*)$")
CONSOLE_URL = re.compile(r"open (http://127\.0\.0\.1:\d+/)")


class ConsoleProcess(ChildProcess):
    """``weft console`` started from the command line weft dev's banner suggests, as printed,
    in a shell with no venv activated."""

    def __init__(self, cwd: Path, command: str) -> None:
        argv = shlex.split(command)
        assert argv[1] == "console", argv
        super().__init__(cwd, [*argv, "--port", "0"], CONSOLE_URL, as_printed=True)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevProcess]:
    started = DevProcess(tmp_path)
    yield started
    if started.process.poll() is None:
        started.process.kill()
        started.process.wait(timeout=10)


def _page(url: str, data: dict[str, str] | None = None) -> tuple[int, str]:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    request = urllib.request.Request(url, data=body, method="GET" if body is None else "POST")
    request.add_header("HX-Request", "true")  # as the console's own pages post
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_console_the_dev_banner_suggests_shows_the_dev_servers_runs(
    dev: DevProcess, tmp_path: Path
) -> None:
    base = dev.wait_for_url()
    suggested = next(
        match[1] for line in dev.output if (match := CONSOLE_LINE.match(line)) is not None
    )
    assert "--table weft-dev" in suggested and "--endpoint-url http://127.0.0.1:" in suggested

    console = ConsoleProcess(tmp_path, suggested)
    try:
        url = console.wait_for_url()
        body = {"workflow_type": "order", "id": "console-order", "input": _order()}
        status, started = call(f"{base}/workflows", "POST", body)
        assert (status, started["status"]) == (201, "running"), started

        listed = poll(
            lambda: "console-order" in _page(url)[1],
            "the console's run list to show the run started on weft dev",
        )
        assert listed
        status, run_page = _page(f"{url}runs/console-order")
        assert status == 200 and "console-order" in run_page

        # the warehouse's signal, sent from the run's page, finishes the run on the dev table
        form = {"name": "ship", "payload": '{"carrier": "express"}'}
        status, answer = _page(f"{url}runs/console-order/act/signal", form)
        assert status == 200 and "signal sent" in answer, answer
        finished = poll(
            lambda: call(f"{base}/workflows/console-order")[1]["status"] == "completed",
            "the run signalled from the console to complete",
        )
        assert finished

        # the operator CLI line the banner prints runs as printed too, and lists the run
        printed = dev.output[next(i for i, x in enumerate(dev.output) if "operator CLI" in x) + 1]
        listing = subprocess.run(
            ["bash", "-c", printed.strip()],
            cwd=tmp_path,
            env=newcomer_environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        assert "console-order" in listing.stdout and "completed" in listing.stdout
    finally:
        console.stop()
        dev.stop()


def _order() -> dict[str, object]:
    from examples.order import SAMPLE_ORDER

    return dict(SAMPLE_ORDER)
