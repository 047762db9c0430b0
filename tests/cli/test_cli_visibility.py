"""``weft list`` filters (``--where``, ``--tag``, ``--started-after``, ``--id-prefix``,
``--order``) and ``weft count --group-by`` on a SQLite store."""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import Engine, SQLiteStorage, WorkflowContext, workflow
from weft_serverless.cli import main
from weft_serverless.testing import VirtualClock


def _wait(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.wait_for_signal("go")


WORKFLOWS = {
    "order": workflow("order", search_attributes={"customer": str, "amount": float}).execute(_wait)
}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "weft.db"
    storage = SQLiteStorage(path)
    clock = VirtualClock()
    with Engine.create(storage, WORKFLOWS, background_tasks="manual", clock=clock) as engine:
        for n in range(5):
            clock.advance(1)
            engine.start(
                "order",
                id=f"order-{n}",
                search_attributes={"customer": f"c-{n % 2}", "amount": 50.0 * n},
                tags=["vip"] if n % 2 else [],
            )
    storage.close()
    return path


def _weft(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_list_filters_by_attributes_tags_and_order(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _weft(
        capsys,
        "list",
        "--db",
        str(db),
        "--json",
        "--where",
        "customer=c-1",
        "--where",
        "amount>=100",
        "--tag",
        "vip",
        "--order",
        "newest",
        "--started-after",
        "2026-01-01T00:00:00+00:00",
        "--id-prefix",
        "order-",
    )
    assert status == 0
    rows = json.loads(out)["workflows"]
    assert [row["id"] for row in rows] == ["order-3"]
    assert rows[0]["search_attributes"] == {"customer": "c-1", "amount": 150.0}
    assert rows[0]["tags"] == ["vip"]


def test_count_groups_and_bad_conditions_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _weft(capsys, "count", "--db", str(db), "--json", "--group-by", "customer")
    assert status == 0
    assert json.loads(out) == {"group_by": "customer", "counts": [["c-0", 3], ["c-1", 2]]}
    status, out, _ = _weft(capsys, "count", "--db", str(db))
    assert status == 0
    assert "running" in out and "5" in out
    status, _, err = _weft(capsys, "list", "--db", str(db), "--where", "amount~1")
    assert status == 2
    assert "InvalidFilterError" in err
    status, _, err = _weft(capsys, "list", "--db", str(db), "--started-after", "yesterday")
    assert status == 2
