"""``weft shards show|change``: the marker as a store holds it, and a live change run from
the command line to its end, resumable and refusing bad counts before any write."""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import Engine, SQLiteStorage, WorkflowContext, workflow
from weft_serverless.cli import main
from weft_serverless.storage import keys, shard_layout


def _noop(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    return
    yield


NOOP = workflow("noop").execute(_noop)


def _store(path: Path) -> None:
    storage = SQLiteStorage(path)
    engine = Engine.create(storage, {"noop": NOOP}, background_tasks="manual")
    for index in range(5):
        engine.start("noop", id=f"n{index}", tags=["t"])
    engine.close()
    storage.close()


def _json(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_show_then_change_a_store_to_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "weft.db"
    _store(db)
    assert main(["shards", "show", "--db", str(db), "--json"]) == 0
    [shown] = _json(capsys)
    assert shown["counts"] == keys.DEFAULT_SHARDS.as_dict() and shown["marker"] is False

    # one step, then stop: the marker holds the change, a rerun carries it on
    change = ["shards", "change", "--db", str(db), "--timers", "8", "--status", "2", "--json"]
    timing = ["--refresh", "0.001", "--longest-invocation", "0"]
    assert main([*change, *timing, "--no-wait"]) == 0
    [first] = _json(capsys)
    assert first["phase"] == "deleting under both"
    assert first["pending"] == {**keys.DEFAULT_SHARDS.as_dict(), "timers": 8, "status": 2}
    assert main(["shards", "change", "--db", str(db), "--json", *timing]) == 0
    steps = _json(capsys)
    assert steps[-1]["phase"] == "stable" and steps[-1]["pending"] is None
    assert sum(int(str(step["moved"])) for step in steps) > 0
    storage = SQLiteStorage(db)
    assert shard_layout.read_shards(storage) == keys.ShardCounts(timers=8, status=2)
    engine = Engine.create(storage, {"noop": NOOP}, background_tasks="manual")
    assert len(engine.list(tags=["t"])) == 5
    assert len(engine.list(status="completed")) == 5
    engine.close()
    storage.close()
    assert main(["shards", "show", "--db", str(db)]) == 0
    assert capsys.readouterr().out.startswith("stable: timers=8, status=2")


def test_bad_counts_are_refused_before_any_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "weft.db"
    _store(db)
    assert main(["shards", "change", "--db", str(db), "--timers", "0"]) == 1
    assert "from 1 to 256" in capsys.readouterr().err
    assert main(["shards", "change", "--db", str(db), "--timers", "8", "--refresh", "0"]) == 1
    assert "shards_refresh" in capsys.readouterr().err
    storage = SQLiteStorage(db)
    assert storage.get(keys.meta_key(keys.LAYOUT)) is None
    storage.close()
