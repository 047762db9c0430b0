"""``weft list --type-prefix`` and ``--counts status``: the list options the console uses,
carried out through the API's operation like every other filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_parity_support import api, db, weft

__all__ = ["db"]  # a fixture from cli_parity_support


def test_list_by_type_prefix_with_the_status_counts(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    status, out, err = weft(
        capsys, "list", "--db", str(db), "--type-prefix", "order", "--counts", "status", "--json"
    )
    assert status == 0, err
    page = json.loads(out)
    assert [row["type"] for row in page["workflows"]] == ["order_saga", "order"]
    assert page["counts"] == [{"value": "completed", "count": 1}, {"value": "failed", "count": 1}]
    status, out, _ = weft(capsys, "list", "--db", str(db), "--counts", "status")
    assert status == 0
    counts = api(db, "count_workflows")["counts"]
    assert out.splitlines()[0] == "counts: " + ", ".join(
        f"{c['value']} {c['count']}" for c in counts
    )
