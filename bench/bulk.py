"""DynamoDB cost of bulk operations, measured on moto with the adapter's request-unit meter.

Parks ``RUNS`` runs waiting for a signal, then prints, per run acted on, the requests, write
units and read units of a dry run (a count of the whole listing), of ``signal_all`` and of
``cancel_all`` (pages of ``PAGE``), in ownership modes ``none`` and ``workflow-lease``.
Run: ``python bench/bulk.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from weft_serverless import Engine, workflow

RUNS, PAGE = 100, 50


def waits(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.wait_for_signal("go")
    yield ctx.wait_for_signal("stop")


DEFINITION = workflow("waits").execute(waits)


def measure(ownership: str) -> list[tuple[str, float, float, float]]:
    import boto3

    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    client = boto3.client("dynamodb", region_name="us-east-1")
    table = f"weft-bulk-{ownership}"
    create_table(client, table)
    storage = DynamoDBStorage(table, client=client)
    engine = Engine.create(
        storage,
        {"waits": DEFINITION},
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        recover=False,
    )
    for n in range(RUNS):
        engine.start("waits", None, id=f"run-{n:04d}")
    rows = []
    for label, call in (
        ("dry run (count)", lambda: engine.signal_all("go", dry_run=True)),
        ("signal_all", None),
        ("cancel_all", None),
    ):
        before = storage.meter.snapshot()
        if call is not None:
            call()
        elif label == "signal_all":
            token = engine.signal_all("go", dry_run=True).token  # type: ignore[union-attr]
            before = storage.meter.snapshot()
            engine.signal_all("go", confirm=token, page_size=PAGE)
        else:
            token = engine.cancel_all(dry_run=True).token  # type: ignore[union-attr]
            before = storage.meter.snapshot()
            engine.cancel_all(confirm=token, page_size=PAGE)
        used = storage.meter.snapshot() - before
        rows.append((label, used.requests / RUNS, used.write_units / RUNS, used.read_units / RUNS))
    engine.close()
    client.delete_table(TableName=table)
    return rows


def main() -> None:
    from moto import mock_aws

    print(f"DynamoDB on moto: {RUNS} parked runs, pages of {PAGE}; figures per run acted on")
    print("(signal_all and cancel_all include driving each woken run inline, manual mode)")
    print(f"{'ownership':<15}{'operation':<17}{'req/run':>9}{'WRU/run':>9}{'RRU/run':>9}")
    with mock_aws():
        for ownership in ("none", "workflow-lease"):
            for label, req, wru, rru in measure(ownership):
                print(f"{ownership:<15}{label:<17}{req:>9.2f}{wru:>9.2f}{rru:>9.2f}")


if __name__ == "__main__":
    main()
