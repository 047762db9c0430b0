"""DynamoDB cost per workflow step, measured on moto with the adapter's request-unit meter.

Prints, for sequential workflows whose steps each return 100 B, 700 B or 4 KB, under
``ownership="none"`` and ``"workflow-lease"``: the requests, write units and read units per
step while the workflow moves forward (the marginal cost of one more step, from runs of two
lengths), the capacity units per step (write and read together), the whole run's cost
(start, steps, finish), and dollars per million steps at on-demand list price.
Run: ``python bench/cost.py``.

The meter's rules (``weft_serverless/storage/dynamodb_meter.py``, DynamoDB's published ones):
a standard write costs ceil(item bytes / 1 KB) write units, at least 1; a strongly consistent
read ceil(bytes / 4 KB) read units, at least 1; every action of ``TransactWriteItems`` costs
twice that (a ``ConditionCheck`` as a read of its item, billed as read units x 2; if AWS
bills it as a write instead, the transaction costs more, never less); a conditional write
refused by its condition is billed as the write it refused; ``BatchWriteItem`` deletes cost
one write unit each. Item bytes count every attribute name and value (key, value, digest).
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

SIZES = (100, 700, 4096)
SHORT, LONG = 10, 30


def sequential(ctx, steps):  # type: ignore[no-untyped-def]
    for step in range(steps):
        yield ctx.run("payload", step)
    return steps


def definition(size: int):  # type: ignore[no-untyped-def]
    """Each step's result is ``size`` bytes once encoded (a bytes value of that length)."""
    body = b"x" * size

    def payload(step: int) -> bytes:
        return body

    return workflow("sequential").activities(payload=payload).execute(sequential)


def measure(ownership: str, size: int, steps: int, run: int):  # type: ignore[no-untyped-def]
    import boto3

    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    client = boto3.client("dynamodb", region_name="us-east-1")
    table = f"weft-cost-{ownership}-{size}-{steps}-{run}"
    create_table(client, table)
    storage = DynamoDBStorage(table, client=client)
    engine = Engine.create(
        storage,
        {"sequential": definition(size)},
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        recover=False,
    )
    before = storage.meter.snapshot()
    handle = engine.start("sequential", steps, id=f"run-{steps}")
    assert handle.result() == steps
    used = storage.meter.snapshot() - before
    engine.close()
    client.delete_table(TableName=table)
    return used


def main() -> None:
    from moto import mock_aws

    from weft_serverless.storage.dynamodb_meter import READ_UNIT_PRICE_USD, WRITE_UNIT_PRICE_USD

    print("DynamoDB on moto: sequential workflows; a forward step's marginal cost")
    print(
        f"prices: ${WRITE_UNIT_PRICE_USD * 1e6:.3f} per million write units, "
        f"${READ_UNIT_PRICE_USD * 1e6:.3f} per million read units (on-demand)"
    )
    header = (
        f"{'ownership':<15}{'result':>7}{'req/step':>9}{'WRU/step':>9}{'RRU/step':>9}"
        f"{'CU/step':>8}{'$/M steps':>11}   {'whole run of ' + str(LONG) + ' steps: req, WRU, RRU'}"
    )
    print(header)
    with mock_aws():
        for ownership in ("none", "workflow-lease"):
            for size in SIZES:
                short = measure(ownership, size, SHORT, 0)
                long = measure(ownership, size, LONG, 1)
                delta = long - short
                n = LONG - SHORT
                req, wru, rru = delta.requests / n, delta.write_units / n, delta.read_units / n
                dollars = (wru * WRITE_UNIT_PRICE_USD + rru * READ_UNIT_PRICE_USD) * 1e6
                whole = f"{long.requests}, {long.write_units}, {long.read_units}"
                print(
                    f"{ownership:<15}{size:>7}{req:>9.2f}{wru:>9.2f}{rru:>9.2f}{wru + rru:>8.2f}"
                    f"{dollars:>11.2f}   {whole}"
                )
                ops = ", ".join(
                    f"{name} {totals.requests / n:.2f}"
                    for name, totals in sorted(delta.by_operation.items())
                )
                print(f"{'':<22}per step by operation: {ops}")


if __name__ == "__main__":
    main()
