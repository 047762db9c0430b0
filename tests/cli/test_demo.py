"""``weft demo`` end to end: a real child process dies, a fresh engine finishes the run.

The demo runs as a user would start it, in a subprocess in an empty directory, and the test
reads only its output and the SQLite file it leaves behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from weft_serverless import Engine, SQLiteStorage

STEPS = [
    ("1", "run:reserve_inventory", "replayed"),
    ("2", "run:charge_payment", "replayed"),
    ("3", "signal:ship", "replayed"),
    ("4", "run:ship_order", "ran"),
    ("5", "run:send_receipt", "ran"),
]
SIDE_EFFECTS = ["[inventory] reserve", "[payments]  charge", "[shipping]  book", "[email]"]
ROW = re.compile(r"^\s+(\d+)\s+(\S+)\s+(replayed|ran)\s", re.MULTILINE)


def run_demo(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "weft_serverless.cli", "demo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def completed_runs(db: Path) -> list[str]:
    storage = SQLiteStorage(db)
    try:
        engine = Engine.create(storage, {}, background_tasks="manual", recover=False)
        return [row.id for row in engine.list(status="completed")]
    finally:
        storage.close()


def assert_crashed_and_resumed(output: str) -> None:
    assert "killed (os._exit)" in output
    assert "holds 3 committed steps" in output
    assert "Engine.create(..., recover=True)" in output
    assert ROW.findall(output) == STEPS, output
    for effect in SIDE_EFFECTS:
        assert output.count(effect) == 1, f"{effect!r} should happen exactly once:\n{output}"
    assert "Process 2 called only: ship_order, send_receipt." in output
    assert "'carrier': 'express', 'tracking': 'EXP-A-1001'}" in output


def test_demo_crashes_for_real_then_resumes_each_step_once(tmp_path: Path) -> None:
    # GIVEN an empty directory WHEN the demo runs on a file in it
    output = run_demo(tmp_path, "--db", str(tmp_path / "demo.db"))

    # THEN the first process died, and the second replayed three steps and ran two
    assert_crashed_and_resumed(output)
    assert len(completed_runs(tmp_path / "demo.db")) == 1


def test_demo_runs_twice_in_a_row_on_the_default_file(tmp_path: Path) -> None:
    # GIVEN a first demo left ./weft.db behind
    first = run_demo(tmp_path)

    # WHEN the demo runs again with no options
    second = run_demo(tmp_path)

    # THEN it starts a new order on the same file and both runs are stored, completed
    assert_crashed_and_resumed(second)
    first_id = re.search(r"workflow (order-\w+)", first)
    second_id = re.search(r"workflow (order-\w+)", second)
    assert first_id and second_id and first_id[1] != second_id[1]
    assert sorted(completed_runs(tmp_path / "weft.db")) == sorted([first_id[1], second_id[1]])


def test_demo_fresh_starts_from_an_empty_file(tmp_path: Path) -> None:
    # GIVEN a file with an earlier demo run in it
    run_demo(tmp_path)

    # WHEN the demo runs with --fresh
    output = run_demo(tmp_path, "--fresh")

    # THEN the file holds only the new run
    assert_crashed_and_resumed(output)
    assert len(completed_runs(tmp_path / "weft.db")) == 1
