"""``weft dev`` as a user runs it: a subprocess on a free loopback port, driven over real HTTP.

The run starts the approval example with sub-second deadlines, so the escalation depends on
the dev server's own timer path (its hint worker at due, or its maintenance ticker), then
approves it, reads the result, and stops the server with SIGINT as Ctrl-C would.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

STARTUP_SECONDS = 30.0
WAIT_SECONDS = 15.0
URL = re.compile(r"weft dev listening on (http://127\.0\.0\.1:\d+)")


class ChildProcess:
    """A ``weft`` command started as a user starts it, its output read line by line on a
    thread, and the address it prints when it is up."""

    def __init__(
        self, cwd: Path, argv: list[str], url: re.Pattern[str], *, as_printed: bool = False
    ) -> None:
        """``as_printed``: ``argv`` is a whole command line as a hint prints it, run in a
        shell whose PATH does not hold the venv (a newcomer's, who did not activate it)."""
        self.url = url
        self.process = subprocess.Popen(
            argv if as_printed else [sys.executable, "-m", "weft_serverless.cli", *argv],
            cwd=cwd,
            env=newcomer_environment(),
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
            match = self.url.search(line)
            if match:
                return match[1]
        raise AssertionError(
            f"weft {self.process.args[3]} did not come up:\n{''.join(self.output)}"
        )


def newcomer_environment() -> dict[str, str]:
    """The environment of a shell with no venv activated and no weft variables set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WEFT_", "POWERTOOLS_"))}
    env.pop("AWS_PROFILE", None)
    env.pop("VIRTUAL_ENV", None)
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if part and part != venv_bin
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


class DevProcess(ChildProcess):
    """``weft dev`` on a free port with a fast maintenance ticker."""

    def __init__(self, cwd: Path, *options: str) -> None:
        super().__init__(cwd, ["dev", "--port", "0", "--tick", "0.2", *options], URL)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=10)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevProcess]:
    started = DevProcess(tmp_path)
    yield started
    if started.process.poll() is None:  # the test failed before stopping it
        started.process.kill()
        started.process.wait(timeout=10)


def call(url: str, method: str = "GET", body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def call_retrying(url: str, method: str, body: Any) -> int:
    """``call``, repeated while the answer is a retryable 409 (another container drives)."""

    def answer() -> int | None:
        status, reply = call(url, method, body)
        return None if status == 409 and reply.get("retryable") else status

    return int(poll(answer, f"{method} {url} to stop being busy"))


def poll(check: Callable[[], Any], what: str) -> Any:
    """Call ``check`` until it returns something truthy, for at most ``WAIT_SECONDS``."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_weft_dev_serves_an_example_over_http_and_stops_on_sigint(
    dev: DevProcess, tmp_path: Path
) -> None:
    base = dev.wait_for_url()

    # WHEN an approval with half-second deadlines is started over HTTP
    request = {
        "request_id": "exp-dev",
        "requester": "ada",
        "approver": "grace",
        "manager": "alan",
        "summary": "conference ticket",
        "amount_cents": 45000,
        "approver_timeout": "500ms",
        "manager_timeout": "1m",
    }
    body = {"workflow_type": "approval", "id": "exp-dev", "input": request}
    status, started = call(f"{base}/workflows", "POST", body)
    assert (status, started["status"]) == (201, "running"), started

    # THEN the dev server's maintenance ticker fires the deadline and escalates it
    def escalated() -> bool:
        _, answer = call(f"{base}/workflows/exp-dev/queries/status", "POST", {})
        return bool(answer["result"]["stage"] == "escalated")

    poll(escalated, "the escalation")

    # WHEN a comment is added and the manager approves
    # (the maintenance container may still hold the run for a moment after the escalation:
    # that is the documented retryable 409, as deployed)
    comment = {"payload": {"by": "ada", "text": "booked early"}}
    assert call_retrying(f"{base}/workflows/exp-dev/updates/comment", "POST", comment) == 200
    approve = {"payload": {"by": "alan"}}
    assert call_retrying(f"{base}/workflows/exp-dev/signals/approve", "POST", approve) == 200

    # THEN the result says so
    def result() -> Any:
        status, answer = call(f"{base}/workflows/exp-dev/result")
        return answer if status == 200 else None

    outcome = poll(result, "the result")["result"]
    assert (outcome["decision"], outcome["decided_by"], outcome["escalated"]) == (
        "approved",
        "alan",
        True,
    )
    assert call(f"{base}/workflows/nope")[0] == 404

    # WHEN Ctrl-C arrives THEN everything stops cleanly, promptly, with status 0
    began = time.monotonic()
    assert dev.stop() == 0
    assert time.monotonic() - began < 5
    output = "".join(dev.output)
    assert "weft dev stopped" in output
    assert "Traceback" not in output
    assert "POST /workflows -> 201" in output
    assert re.search(r"(maintenance|timers): \d+ timer\(s\) fired", output)
    assert "[notify]    to alan: no answer from grace" in output
    assert list(tmp_path.iterdir()) == []  # nothing written to the working directory


FLAKY_FLOWS = """
from weft_serverless import RetryPolicy, workflow

attempts = []


def flaky(name):
    attempts.append(name)
    if len(attempts) == 1:
        raise RuntimeError("first attempt fails")
    return f"hello {name}"


def greet(ctx, name):
    return (yield ctx.run("flaky", name, retry=RetryPolicy(initial_backoff=0.2)))


workflows = {"greet": workflow("greet").activities(flaky=flaky).execute(greet)}
"""


def test_a_waiting_start_sees_its_retry_fired_by_the_ticker_meanwhile(tmp_path: Path) -> None:
    """The retry timer is due 0.2 s into a 10 s wait: maintenance must fire it during the wait,
    while the API request is still being served."""
    (tmp_path / "flaky_flows.py").write_text(FLAKY_FLOWS)
    dev = DevProcess(tmp_path, "--workflows", "flaky_flows")
    try:
        base = dev.wait_for_url()
        began = time.monotonic()
        body = {"workflow_type": "greet", "id": "g-1", "input": "ada", "wait_seconds": 10}
        status, started = call(f"{base}/workflows", "POST", body, timeout=20)
        elapsed = time.monotonic() - began
        assert (status, started["status"], started["result"]) == (201, "completed", "hello ada")
        assert elapsed < 8, f"the wait ran {elapsed:.1f} s: the retry fired only after it"
    finally:
        assert dev.stop() == 0, "".join(dev.output)
    assert "Traceback" not in "".join(dev.output)


def test_weft_dev_runs_from_an_installed_package_without_the_source_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel installs ``weft_serverless`` only: no ``handlers/`` (nor ``examples/``) beside
    it. The API handler must come from the package, as ``handlers/api.py`` takes it."""
    import weft_serverless

    site = tmp_path / "site"  # the package alone, as an installed wheel lays it out
    shutil.copytree(
        Path(weft_serverless.__file__).parent,
        site / "weft_serverless",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "flaky_flows.py").write_text(FLAKY_FLOWS)
    monkeypatch.setenv("PYTHONPATH", str(site))
    dev = DevProcess(work, "--workflows", "flaky_flows")
    try:
        base = dev.wait_for_url()
        body = {"workflow_type": "greet", "id": "g-1", "input": "ada", "wait_seconds": 10}
        status, started = call(f"{base}/workflows", "POST", body, timeout=20)
        assert (status, started["status"], started["result"]) == (201, "completed", "hello ada")
    finally:
        assert dev.stop() == 0, "".join(dev.output)
    assert "Traceback" not in "".join(dev.output)


# -- the translation between HTTP and Lambda, in-process ------------------------------------


def test_requests_become_rest_proxy_events_for_the_deployed_resources() -> None:
    from weft_serverless.lambda_events import rest_event

    event = rest_event(
        "GET",
        "/workflows/exp%207/result?wait_seconds=1&x=1&x=2",
        [("Host", "localhost"), ("Accept", "a"), ("Accept", "b")],
        b"",
    )
    assert event["path"] == "/workflows/exp%207/result"  # still encoded, as API Gateway sends it
    assert event["resource"] == "/workflows/{proxy+}"
    assert event["pathParameters"] == {"proxy": "exp%207/result"}
    assert event["queryStringParameters"] == {"wait_seconds": "1", "x": "2"}
    assert event["multiValueQueryStringParameters"]["x"] == ["1", "2"]
    assert (event["headers"]["Accept"], event["multiValueHeaders"]["Accept"]) == ("b", ["a", "b"])
    assert (event["body"], event["isBase64Encoded"]) == (None, False)
    assert event["requestContext"]["stage"] == "dev"

    start = rest_event("POST", "/workflows", [], b"\xff\x00")
    assert (start["resource"], start["pathParameters"]) == ("/workflows", None)
    assert (start["body"], start["isBase64Encoded"]) == ("/wA=", True)


def test_handler_answers_become_http_as_api_gateway_reads_them() -> None:
    from weft_serverless.lambda_events import response_parts, scheduled_event

    status, headers, body = response_parts(
        {
            "statusCode": 201,
            "multiValueHeaders": {"X-A": ["1", "2"]},
            "headers": {"x-a": "ignored", "Content-Type": "application/json"},
            "body": "eyJvayI6IHRydWV9",
            "isBase64Encoded": True,
        }
    )
    assert (status, body) == (201, b'{"ok": true}')
    assert headers == [("X-A", "1"), ("X-A", "2"), ("Content-Type", "application/json")]
    assert response_parts(None)[0] == 502  # a handler that returns garbage: API Gateway's 502

    event = scheduled_event("eu-west-1")
    assert (event["detail-type"], event["source"], event["detail"]) == (
        "Scheduled Event",
        "aws.events",
        {},
    )
    assert event["resources"][0].startswith("arn:aws:events:eu-west-1:")
