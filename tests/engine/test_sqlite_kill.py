"""A process killed (SIGKILL) while it commits steps on SQLite loses no committed step and
half-writes none. A step's commit there is one INSERT run as its own transaction; this kills
a real process at a random moment of a stream of them (most of its time is spent inside
them, waiting for the fsync), where a simulated crash (``CrashingStorage``) cannot reach."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import Engine, SQLiteStorage, WorkflowContext, workflow
from weft_serverless.codec import decode, encode
from weft_serverless.storage import keys

STEPS = 3000
KILL_AFTER = 200  # committed steps seen before the kill

CHILD = """
import sys
from weft_serverless import Engine, SQLiteStorage, workflow

def echo(value):
    return value

def counted(ctx, steps):
    total = 0
    for index in range(steps):
        total += yield ctx.run(echo, index)
    return total

flow = workflow("counted").activities(echo=echo).execute(counted)
engine = Engine.create(SQLiteStorage(sys.argv[1]), {"counted": flow}, background_tasks="manual")
engine.start("counted", int(sys.argv[2]), id="killed")
"""


def echo(value: int) -> int:
    return value


def counted(ctx: WorkflowContext, steps: int) -> Generator[Any, Any, int]:
    total = 0
    for index in range(steps):
        total += yield ctx.run(echo, index)
    return total


def _committed_steps(path: Path) -> int:
    conn = sqlite3.connect(path, timeout=30)
    try:
        row = conn.execute(
            "SELECT count(*) FROM kv WHERE partition = ? AND sort LIKE 'op#%'",
            (keys.workflow_partition("killed"),),
        ).fetchone()
        return int(row[0])
    except sqlite3.OperationalError:  # the table is not there yet
        return 0
    finally:
        conn.close()


@pytest.mark.storage("sqlite")
def test_a_process_killed_mid_commit_loses_and_half_writes_no_step(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(STEPS)], env=env)
    try:
        deadline = time.monotonic() + 60
        while _committed_steps(path) < KILL_AFTER:
            assert child.poll() is None, "the child ended before it was killed"
            assert time.monotonic() < deadline, "the child committed too few steps"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    killed_at = _committed_steps(path)
    assert KILL_AFTER <= killed_at < STEPS  # killed mid-run, not after it

    storage = SQLiteStorage(path)
    try:
        # Every committed step is whole and in order: records 0..k-1, each with its result.
        partition = keys.workflow_partition("killed")
        records = list(storage.scan(partition, keys.OP_PREFIX))
        assert [sort for sort, _ in records] == [
            keys.OP_PREFIX + keys.step_slot(index) for index in range(len(records))
        ]
        for index, (_, value) in enumerate(records):
            record = decode(value)
            assert (record["sig"], record["v"]) == ("run:echo", encode(index))

        flow = workflow("counted").activities(echo=echo).execute(counted)
        engine = Engine.create(storage, {"counted": flow}, background_tasks="manual")
        assert engine.get_handle("killed").result() == sum(range(STEPS))
        assert len(list(storage.scan(partition, keys.OP_PREFIX))) == STEPS
    finally:
        storage.close()
