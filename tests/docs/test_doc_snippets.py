"""Every command and snippet a reader can run in README.md and docs/*.md runs, as written.

The blocks are read from the documents themselves, so there is no second copy to drift.
Each document is one reader's session in a fresh folder, its blocks in order:

* a ``python`` block runs as a script in that folder (``python -`` with the checkout on the
  path), unless ``<!-- file: NAME -->`` stands right above it: then it is saved as NAME, as
  the text tells the reader to, for the commands that follow;
* a ``bash`` block runs command by command (a command may span lines). ``python``,
  ``pytest`` and ``weft`` are this checkout's (``.venv/bin/`` in front of them is the same
  venv). ``weft dev`` starts the local stack in the background, on a free port: the
  documented ``localhost:8080`` and moto endpoint are rewritten to the ones it printed, and
  it is stopped with SIGINT at the end. ``export`` sets variables for the later commands.
  A command commented ``# Ctrl-C after "TEXT"`` gets SIGINT once TEXT has been printed.
  Every other command must exit 0.
* ``<!-- not-run: REASON -->`` right above a block excludes it (installs from the network,
  an AWS account, the whole test suite); each such marker is listed by the test that checks
  the reasons, so adding one is a reviewed change.

``docs/features.md`` is left to ``tests/features/test_features_doc_examples.py``, which
runs each of its examples with its asserts; ``docs/decisions/`` holds no runnable snippet.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COVERED_ELSEWHERE = {"features.md": "tests/features/test_features_doc_examples.py"}
RUNNABLE = ("python", "bash")
COMMAND_SECONDS = 120.0
BLOCK = re.compile(
    r"^(?:<!--\s*(?P<marker>[\w-]+):\s*(?P<value>.*?)\s*-->\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
DEV_URL = re.compile(r"weft dev listening on (http://[\d.]+:\d+)")
DEV_MOTO = re.compile(r"moto at (http://[\d.]+:\d+)")
CTRL_C = re.compile(r'#\s*Ctrl-C after "(?P<text>[^"]+)"')
DOCUMENTED_API = ("http://localhost:8080", "localhost:8080", "http://127.0.0.1:8080")
DOCUMENTED_MOTO = "http://127.0.0.1:45179"
PROGRAMMING_ERRORS = frozenset(
    {"KeyError", "TypeError", "AttributeError", "IndexError", "NameError", "ValueError"}
)

# Excluded blocks, by document and first line: the review list of every not-run marker.
NOT_RUN = {
    ("README.md", "bash scripts/demo"),
    (
        "simulation.md",
        "python -m weft_serverless.testing.simulate --seed 100000 --seeds 1000000 --steps 120"
        " --engines 4 --time-limit 3600",
    ),
    ("README.md", ".venv/bin/pip install -e '.[local]'"),
    ("local-dev.md", ".venv/bin/pip install -e '.[console]'"),
    ("getting-started.md", "python -m venv .venv"),
    ("deploy.md", "npx -y aws-cdk bootstrap"),
    (
        "deploy.md",
        "python infra/build_asset.py --workflows-module examples.order --out build/lambda",
    ),
    ("deploy.md", "npx -y aws-cdk deploy"),
    (
        "deploy.md",
        "npx -y aws-cdk deploy -c workflowsModule=shop.flows -c stackName=shop-weft"
        " -c alarmEmail=ops@example.com",
    ),
    ("deploy.md", 'curl --aws-sigv4 "aws:amz:$AWS_REGION:execute-api" \\'),
    ("deploy.md", "from weft_serverless_infra import WeftServerless"),
    ("deploy.md", "npx -y aws-cdk destroy"),
    ("aws-runtime.md", "from weft_serverless.aws import ("),
    (
        "storage-dynamodb.md",
        "from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table",
    ),
    ("storage-dynamodb.md", "storage = DynamoDBStorage.from_env()"),
    (
        "storage-dynamodb.md",
        "storage.time_budget = lambda: context.get_remaining_time_in_millis() / 1000 - 2.0",
    ),
    ("storage-dynamodb.md", "before = storage.meter.snapshot()"),
    (
        "deploy.md",
        "aws dynamodb update-table --table-name <TableName> --no-deletion-protection-enabled",
    ),
}


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    lang: str
    code: str
    marker: str | None
    value: str

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0] if self.code else ""


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [
        Block(
            path.name,
            text.count("\n", 0, m.start("code")) + 1,
            m["lang"],
            m["code"],
            m["marker"],
            m["value"] or "",
        )
        for m in BLOCK.finditer(text)
    ]


def _sessions() -> list[Path]:
    return [path for path in DOCUMENTS if path.name not in COVERED_ELSEWHERE]


def test_the_documents_and_the_exclusions_are_the_reviewed_ones() -> None:
    excluded = {
        (b.document, b.first_line.split("  #")[0].strip())
        for path in DOCUMENTS
        for b in blocks_of(path)
        if b.marker == "not-run"
    }
    assert excluded == {(doc, line.strip()) for doc, line in NOT_RUN}
    for path in DOCUMENTS:
        for block in blocks_of(path):
            assert block.marker in (None, "not-run", "file"), (block.document, block.line)
            if block.marker == "not-run":
                assert len(block.value) >= 15, f"{block.document}:{block.line} needs a reason"
    assert (ROOT / COVERED_ELSEWHERE["features.md"]).is_file()


def test_no_runnable_command_hides_in_an_indented_block() -> None:
    """Indented code is invisible to this test, so commands must be fenced."""
    command = re.compile(r"^ {4}(\.venv/bin/|weft |curl |python |pip |pytest |npx )", re.M)
    for path in DOCUMENTS:
        outside = BLOCK.sub("", path.read_text(encoding="utf-8"))
        assert not command.findall(outside), path.name


# -- running a session -------------------------------------------------------------------------


@dataclass
class Session:
    folder: Path
    env: dict[str, str]
    bin: Path
    replacements: dict[str, str] = field(default_factory=dict)
    dev: subprocess.Popen[str] | None = None
    dev_output: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    runs: dict[str, str] = field(default_factory=dict)

    def where(self, block: Block) -> str:
        return f"{block.document}:{block.line}"

    # python -------------------------------------------------------------------------------

    def python(self, block: Block) -> None:
        if block.marker == "file":
            (self.folder / block.value).write_text(block.code, encoding="utf-8")
            return
        done = subprocess.run(
            [sys.executable, "-"],
            input=block.code,
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )
        assert done.returncode == 0, f"{self.where(block)}:\n{done.stdout}\n{done.stderr}"

    # bash ---------------------------------------------------------------------------------

    def bash(self, block: Block) -> None:
        for command in commands(block.code):
            self.run(block, command)

    def run(self, block: Block, command: str) -> None:
        words = shlex.split(command, comments=True)
        if not words:
            return
        if words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = self.rewrite(value)
            return
        if words[0].removeprefix(".venv/bin/") == "weft" and words[1:2] == ["dev"]:
            self.start_dev(block, words[2:])
            return
        text = self.rewrite(re.sub(r"(^|\s)\.venv/bin/", r"\1", command))
        ctrl_c = CTRL_C.search(command)
        if ctrl_c:
            self.interrupt_after(block, text, ctrl_c["text"])
            return
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", text],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )
        self.log.append(f"$ {text}\n{done.stdout}{done.stderr}")
        assert done.returncode == 0, (
            f"{self.where(block)}: `{text}` exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )

    def rewrite(self, text: str) -> str:
        for documented, actual in self.replacements.items():
            text = text.replace(documented, actual)
        return text

    def interrupt_after(self, block: Block, command: str, expected: str) -> None:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines = read_lines(process)
        seen = wait_for(lines, lambda line: expected in line)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
        assert seen, f"{self.where(block)}: `{command}` never printed {expected!r}: {lines}"

    def start_dev(self, block: Block, options: list[str]) -> None:
        self.stop_dev()
        self.dev = subprocess.Popen(
            [sys.executable, "-m", "weft_serverless.cli", "dev", *options, "--port", "0"],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.dev_output = read_lines(self.dev)
        url = wait_for(self.dev_output, DEV_URL.search)
        moto = wait_for(self.dev_output, DEV_MOTO.search)
        assert url and moto, f"{self.where(block)}: weft dev did not start: {self.dev_output}"
        for documented in DOCUMENTED_API:
            prefix = "" if documented.startswith("http") else "http://"
            self.replacements[documented] = url[1].removeprefix(prefix)
        self.replacements[DOCUMENTED_MOTO] = moto[1]

    def check_runs(self) -> None:
        """No run the commands started failed on a programming error: a snippet whose input
        does not fit the workflow (a missing key, a wrong type) answers 201 and then fails."""
        base = self.replacements.get("http://localhost:8080")
        if base is None or self.dev is None or self.dev.poll() is not None:
            return
        with urllib.request.urlopen(f"{base}/workflows?limit=1000", timeout=10) as page:
            ids = [row["id"] for row in json.loads(page.read())["items"]]
        for workflow_id in ids:
            url = f"{base}/workflows/{urllib.parse.quote(workflow_id, safe='')}"
            with urllib.request.urlopen(url, timeout=10) as answer:
                run = json.loads(answer.read())
            error = run.get("error") or {}
            self.runs[workflow_id] = run["status"]
            assert error.get("type") not in PROGRAMMING_ERRORS, (workflow_id, error)

    def stop_dev(self) -> None:
        self.check_runs()
        if self.dev is not None and self.dev.poll() is None:
            self.dev.send_signal(signal.SIGINT)
            assert self.dev.wait(timeout=30) == 0, "".join(self.dev_output)
            output = "".join(self.dev_output)
            assert "Traceback" not in output, output
        self.dev = None


def commands(code: str) -> Iterator[str]:
    """Logical commands: a line continues while it ends in a backslash or a quote is open."""
    pending = ""
    for line in code.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        yield pending
        pending = ""
    assert not pending, f"unterminated command: {pending}"


def read_lines(process: subprocess.Popen[str]) -> list[str]:
    """Collect the process's output lines on a thread; the list grows as they come."""
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def wait_for(lines: list[str], check: object, seconds: float = 60.0) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in list(lines):
            found = check(line)  # type: ignore[operator]
            if found:
                return found
        time.sleep(0.05)
    return None


def _environment(folder: Path, bin_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WEFT_", "POWERTOOLS_", "PYTEST_")) and k != "AWS_PROFILE"
    }
    bin_dir.mkdir()
    shims = {
        "python": f'exec {sys.executable} "$@"',
        "pytest": f'exec {sys.executable} -m pytest "$@"',
        "weft": f'exec {sys.executable} -m weft_serverless.cli "$@"',
    }
    for name, body in shims.items():
        shim = bin_dir / name
        shim.write_text(f"#!/usr/bin/env bash\n{body}\n")
        shim.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("document", _sessions(), ids=lambda path: path.name)
def test_every_snippet_of_the_document_runs(document: Path, tmp_path: Path) -> None:
    folder = tmp_path / "reader"
    (folder / "docs").mkdir(parents=True)  # commands written for the checkout's top level
    session = Session(folder, _environment(folder, tmp_path / "bin"), tmp_path / "bin")
    try:
        for block in blocks_of(document):
            if block.marker == "not-run" or block.lang not in RUNNABLE:
                continue
            if block.lang == "python":
                session.python(block)
            else:
                session.bash(block)
    finally:
        session.stop_dev()


def test_every_documented_npx_command_can_run_without_a_prompt() -> None:
    """npx asks before installing the CDK CLI and stops where it cannot ask: ``-y``."""
    found = 0
    for path in DOCUMENTS:
        for block in blocks_of(path):
            for command in commands(block.code) if block.lang == "bash" else ():
                words = shlex.split(command, comments=True)
                if words[:1] == ["npx"]:
                    found += 1
                    assert "-y" in words or "--yes" in words, (path.name, command)
    assert found >= 4
