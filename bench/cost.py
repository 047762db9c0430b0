"""DynamoDB cost per workflow step, measured on moto with the adapter's request-unit meter.

Prints, for a sequential workflow whose steps each return 1 KB, the requests, write units and
read units per step while the workflow moves forward (the marginal cost of one more step,
from runs of two lengths), the fixed cost of a whole run (start, steps, finish), and dollars
per million steps at on-demand list price. Run: ``python bench/cost.py``.
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

PAYLOAD = "x" * 1000
SHORT, LONG = 10, 30


def one_kb(step: int) -> str:
    return PAYLOAD


def sequential(ctx, steps):  # type: ignore[no-untyped-def]
    for step in range(steps):
        yield ctx.run("one_kb", step)
    return steps


DEFINITION = workflow("sequential").activities(one_kb=one_kb).execute(sequential)


def measure(ownership: str, steps: int, run: int):  # type: ignore[no-untyped-def]
    import boto3

    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    client = boto3.client("dynamodb", region_name="us-east-1")
    table = f"weft-cost-{ownership}-{steps}-{run}"
    create_table(client, table)
    storage = DynamoDBStorage(table, client=client)
    engine = Engine.create(
        storage,
        {"sequential": DEFINITION},
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

    print(f"DynamoDB on moto: sequential workflow, each step returns {len(PAYLOAD)} bytes")
    print(
        f"prices: ${WRITE_UNIT_PRICE_USD * 1e6:.3f} per million write units, "
        f"${READ_UNIT_PRICE_USD * 1e6:.3f} per million read units (on-demand)"
    )
    header = (
        f"{'ownership':<15}{'req/step':>9}{'WRU/step':>9}{'RRU/step':>9}"
        f"{'$/M steps':>11}   {'whole run of ' + str(LONG) + ' steps: req, WRU, RRU':<34}"
    )
    print(header)
    with mock_aws():
        for ownership in ("none", "workflow-lease"):
            short = measure(ownership, SHORT, 0)
            long = measure(ownership, LONG, 1)
            delta = long - short
            n = LONG - SHORT
            req, wru, rru = delta.requests / n, delta.write_units / n, delta.read_units / n
            dollars = (wru * WRITE_UNIT_PRICE_USD + rru * READ_UNIT_PRICE_USD) * 1e6
            whole = f"{long.requests}, {long.write_units}, {long.read_units}"
            print(f"{ownership:<15}{req:>9.2f}{wru:>9.2f}{rru:>9.2f}{dollars:>11.2f}   {whole}")
            ops = ", ".join(
                f"{name} {totals.requests / n:.2f}"
                for name, totals in sorted(delta.by_operation.items())
            )
            print(f"{'':<15}per step by operation: {ops}")


if __name__ == "__main__":
    main()
