"""A purge (explicit or by retention) leaves nothing of the run but its owner epoch, which
keeps a reused id fenced: not its records, index entries, timers, nor the markers of the bulk
retries that acted on it. The whole store is listed, partition by partition, to prove it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from feature_support import Opener, make_engine

from weft_serverless import RetryPolicy, workflow
from weft_serverless.engine.bulk import operation as bulk
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.storage.memory import MemoryStorage

pytestmark = pytest.mark.backends("memory", "sqlite")

KEPT = {"none": [], "workflow-lease": [keys.OWNER_EPOCH]}
"""What a purge keeps of a run, by ownership mode: its epoch, so a reused id stays fenced."""


def every_key(storage: Storage, tmp_path: Path) -> list[tuple[str, str]]:
    """Every (partition, sort) the store holds: no backend lists partitions, so this reads
    the memory backend's table or the SQLite file directly."""
    if isinstance(storage, MemoryStorage):
        tables = storage._partitions  # the test's view of the whole store
        return sorted((p, s) for p, table in tables.items() for s in table.sorts)
    with sqlite3.connect(tmp_path / "weft.db") as db:
        return sorted(db.execute("SELECT partition, sort FROM kv").fetchall())


def naming(pairs: list[tuple[str, str]], workflow_id: str) -> list[tuple[str, str]]:
    name = keys.enc(workflow_id)
    return [(p, s) for p, s in pairs if name in p or name in s]


def _flows() -> dict[str, Any]:
    def broken(_: Any) -> None:
        raise RuntimeError("still broken")

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("broken", retry=RetryPolicy(max_attempts=1)))

    return {"fragile": workflow("fragile").activities(broken=broken).execute(body)}


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_purge_removes_the_bulk_retry_markers_with_the_run(
    storage_factory: Opener, tmp_path: Path, ownership: str
) -> None:
    te = make_engine(storage_factory, _flows(), retention={"failed": "1h"}, ownership=ownership)
    for workflow_id in ("purged-by-hand", "purged-by-retention"):
        te.start("fragile", id=workflow_id)
    token = te.retry_failed_all(dry_run=True).token  # type: ignore[union-attr]
    operation = te.retry_failed_all(confirm=token)
    assert operation.done == 2  # type: ignore[union-attr]
    assert te.describe("purged-by-hand").status == "failed"  # failed again after the retry
    te.purge("purged-by-hand")
    te.advance(3601)  # the retention window of the second run's latest failure
    store = every_key(te.storage, tmp_path)
    for workflow_id in ("purged-by-hand", "purged-by-retention"):
        partition = keys.workflow_partition(workflow_id)
        assert naming(store, workflow_id) == [(partition, sort) for sort in KEPT[ownership]]
    assert [p for p, _ in store if p == keys.BULK_PARTITION]  # the audit record stays


def test_an_operation_stored_before_markers_moved_still_retries_no_run_twice(
    storage_factory: Opener,
) -> None:
    """An operation recorded without ``marks_runs`` (stored by an earlier release, resumed
    by this one) keeps marking runs in its own partition, where its earlier pages did."""
    te = make_engine(storage_factory, _flows())
    te.start("fragile", id="old")
    record = {"id": "0001767225600000-0ld0ld00", "kind": "retry"}  # as stored then: no flag
    rt, woken = te.engine.runtime, lambda _: None
    assert bulk._act(rt, record, "old", woken) == ("done", "")
    assert te.storage.get(keys.legacy_bulk_run_key(record["id"], "old")) is not None
    assert te.storage.get(keys.bulk_run_key(record["id"], "old")) is None
    assert te.engine.resume("old") == "failed"  # the retried run, driven, fails again
    assert bulk._act(rt, record, "old", woken) == ("done", "")  # its page, repeated
    assert te.describe("old").status == "failed"  # and not retried a second time
