"""What one filtered list page (limit 50) costs over 10,000 runs, on DynamoDB (moto) and SQLite.

The runs are seeded with a bulk loader: each run's state and index items, exactly as a start
writes them (``visibility.index_ops``), put with ``BatchWriteItem`` on moto (its transactions
take about 0.2 s per run, so 10,000 engine starts would take over half an hour) and in
batches of 100 on SQLite; a list reads only the index, so how the items got there does not
change what a page costs. Runs have ``customer`` (one of 100),
``amount`` (0 to 999) and ``region`` (one of 4), every tenth a ``vip`` tag; 90% are running.

Each query prints the storage requests, DynamoDB read units, index items read and wall time
of the first page. Run: ``python bench/visibility.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from weft_serverless import Engine, workflow
from weft_serverless.engine.persistence import index_entries as visibility
from weft_serverless.engine.persistence.records import COMPLETED, RUNNING, WorkflowState
from weft_serverless.storage import keys
from weft_serverless.storage.base import Op, Put, Storage

RUNS = 10_000
LIMIT = 50
T0 = 1_767_225_600.0


def _body(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.wait_for_signal("go")


DEFINITION = workflow(
    "order", search_attributes={"customer": str, "amount": float, "region": str}
).execute(_body)

QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("customer == c-7 (indexed)", {"where": {"customer": "c-7"}}),
    (
        "customer == c-7, running, amount >= 500, newest",
        {
            "status": "running",
            "where": {"customer": "c-7", "amount": (">=", 500)},
            "order": "newest",
        },
    ),
    ("tag vip + region == eu", {"tags": ["vip"], "where": {"region": "eu"}}),
    (
        "region in (eu, us), started in a window",
        {
            "where": {"region": ("in", ["eu", "us"])},
            "started_after": T0 + 2000,
            "started_before": T0 + 6000,
        },
    ),
    ("amount >= 990 only (status index + filter)", {"where": {"amount": (">=", 990)}}),
]


def run_items(n: int) -> list[Put]:
    """One run's state and index items, exactly as its start writes them."""
    extra = visibility.with_visibility(
        {},
        {
            "customer": f"c-{n % 100}",
            "amount": float(n % 1000),
            "region": ("eu", "us", "apac", "sa")[n % 4],
        },
        ["vip"] if n % 10 == 0 else [],
    )
    state = WorkflowState(
        id=f"order-{n:05d}",
        type="order",
        version="1",
        status=COMPLETED if n % 10 == 3 else RUNNING,
        input=b"\xc0",
        created_at=T0 + n,
        updated_at=T0 + n,
        extra=extra,
    )
    ops: list[Put] = [Put(keys.state_key(state.id), state.to_bytes())]
    ops += [
        op for op in visibility.index_ops(keys.DEFAULT_SHARDS, None, state) if isinstance(op, Put)
    ]
    return ops


def seed(storage: Storage) -> None:
    """SQLite: atomic batches of up to 100 items."""
    ops: list[Op] = []
    for n in range(RUNS):
        run_ops = run_items(n)
        if len(ops) + len(run_ops) > 100:
            storage.batch(ops)
            ops = []
        ops += run_ops
    storage.batch(ops)


def seed_dynamodb(client: Any, table: str) -> None:
    """DynamoDB: ``BatchWriteItem`` of 25 items (moto's transactions are far slower); the
    items are the ones the adapter writes (``inline_item``)."""
    from weft_serverless.storage.dynamodb_items import inline_item, value_digest

    puts = [op for n in range(RUNS) for op in run_items(n)]
    for start in range(0, len(puts), 25):
        requests = [
            {"PutRequest": {"Item": inline_item(op.key, op.value, value_digest(op.value))}}
            for op in puts[start : start + 25]
        ]
        client.batch_write_item(RequestItems={table: requests})


def measure(name: str, storage: Storage, meter: Any) -> None:
    engine = Engine.create(storage, {"order": DEFINITION}, background_tasks="manual", recover=False)
    print(f"\n{name}: {RUNS} runs, first page of {LIMIT}")
    print(f"{'query':<52}{'rows':>5}{'requests':>9}{'RRU':>6}{'items read':>11}{'ms':>10}")
    for label, filters in QUERIES:
        before_stats = storage.stats.snapshot()
        before_units = meter.snapshot() if meter else None
        started = time.perf_counter()
        rows, _ = engine.list_page(limit=LIMIT, **filters)
        elapsed = (time.perf_counter() - started) * 1000
        after = storage.stats.snapshot()
        units = (meter.snapshot() - before_units).read_units if meter else 0
        requests = after["requests"] - before_stats["requests"]
        items = after["scanned_items"] - before_stats["scanned_items"]
        rru = str(units) if meter else "-"
        print(f"{label:<52}{len(rows):>5}{requests:>9}{rru:>6}{items:>11}{elapsed:>10.1f}")
    engine.close()


def main() -> None:
    import boto3
    from moto import mock_aws

    from weft_serverless import SQLiteStorage
    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "weft-visibility")
        dynamo = DynamoDBStorage("weft-visibility", client=client)
        started = time.perf_counter()
        seed_dynamodb(client, "weft-visibility")
        print(f"seeded {RUNS} runs on moto in {time.perf_counter() - started:.1f} s (bulk loader)")
        measure("DynamoDB (moto)", dynamo, dynamo.meter)
        print("(ms on moto is moto's in-memory Query, which walks the whole table each call;")
        print(" requests and read units are what DynamoDB would bill for the same page)")
    with tempfile.TemporaryDirectory() as folder:
        sqlite = SQLiteStorage(Path(folder) / "weft.db")
        seed(sqlite)
        measure("SQLite", sqlite, None)
        sqlite.close()


if __name__ == "__main__":
    main()
