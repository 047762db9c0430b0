"""A newcomer's path: ``weft dev`` in one shell, the ``weft console`` line its banner prints in
another, and the console showing and controlling what runs on the dev server's table.

Both are real subprocesses talking over loopback HTTP: weft dev's moto DynamoDB, its API, and
the console's own server.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dev_server import DevProcess, call, poll

CONSOLE_LINE = re.compile(r"^\s*(weft console .*)$")
CONSOLE_URL = re.compile(r"open (http://127\.0\.0\.1:\d+/)")
STARTUP_SECONDS = 30.0


class ConsoleProcess:
    """``weft console`` started from the command line weft dev's banner suggests."""

    def __init__(self, cwd: Path, command: str) -> None:
        argv = shlex.split(command)
        assert argv[:2] == ["weft", "console"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WEFT_", "POWERTOOLS_"))}
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "weft_serverless.cli", *argv[1:], "--port", "0"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for_url(self) -> str:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            match = CONSOLE_URL.search(line)
            if match:
                return match[1]
        raise AssertionError(f"weft console did not come up:\n{''.join(self.output)}")

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
    finally:
        console.stop()
        dev.stop()


def _order() -> dict[str, object]:
    from examples.order import SAMPLE_ORDER

    return dict(SAMPLE_ORDER)
