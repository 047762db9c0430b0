"""What a concurrency limit costs, measured on moto with the adapter's request-unit meter.

Prints, for a one-step workflow (ownership mode ``none``), the requests, write units and read
units of a whole run (start, step, end) without a limit, with ``reject`` and with ``queue``
when a slot is free. Then, for a run that waits for a signal while another run of its key
ends, followed by two maintenance passes: without a limit, and with ``queue`` when the run
waited queued and those passes admitted and drove it. ADR 0025 says where each difference
comes from. Run: ``python bench/concurrency.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from typing import Any

from weft_serverless import Concurrency, Engine, workflow


def step(x: Any) -> Any:
    return x


def one_step(ctx, job):  # type: ignore[no-untyped-def]
    return (yield ctx.run("step", job["n"]))


def gated(ctx, job):  # type: ignore[no-untyped-def]
    yield ctx.wait_for_signal("go")
    return (yield ctx.run("step", job["n"]))


def _definitions(limit: Concurrency | None) -> dict[str, Any]:
    return {
        "one": workflow("one", concurrency=limit).activities(step=step).execute(one_step),
        "gated": workflow("gated", concurrency=limit).activities(step=step).execute(gated),
    }


def measure(label: str, limit: Concurrency | None, queued: bool, run: int):  # type: ignore[no-untyped-def]
    import boto3

    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    client = boto3.client("dynamodb", region_name="us-east-1")
    table = f"weft-conc-{run}"
    create_table(client, table)
    storage = DynamoDBStorage(table, client=client)
    engine = Engine.create(storage, _definitions(limit), background_tasks="manual", recover=False)
    if queued:  # a holder fills the key; its end is not counted, the measured run's life is
        engine.start("gated", {"a": "x", "n": 0}, id="holder")
    before = storage.meter.snapshot()
    if queued:
        handle = engine.start("gated", {"a": "x", "n": 1}, id="measured")
        after_start = storage.meter.snapshot()
        engine.signal("holder", "go")
        between = storage.meter.snapshot() - after_start
        engine.run_maintenance()  # admits a queued run (wake-up due now)
        engine.run_maintenance()  # drives it to its signal wait
        engine.signal("measured", "go")
        assert handle.result() == 1
        used = storage.meter.snapshot() - before - between
    else:
        assert engine.start("one", {"a": "x", "n": 1}, id="measured").result() == 1
        used = storage.meter.snapshot() - before
    engine.close()
    client.delete_table(TableName=table)
    return used


def main() -> None:
    from moto import mock_aws

    print("DynamoDB on moto, ownership none: one whole run (start, one step, end)")
    print(f"{'limit':<34}{'requests':>9}{'WRU':>7}{'RRU':>7}")
    queue = Concurrency(max=1, key=lambda j: j["a"], on_limit="queue")
    cases = [
        ("none", None, False),
        ("reject (max 1)", Concurrency(max=1, key=lambda j: j["a"]), False),
        ("queue (max 1), slot free", queue, False),
        ("none, + signal, 2 passes", None, True),
        ("queue (max 1), queued, admitted", queue, True),
    ]
    with mock_aws():
        for run, (label, limit, queued) in enumerate(cases):
            used = measure(label, limit, queued, run)
            print(f"{label:<34}{used.requests:>9}{used.write_units:>7}{used.read_units:>7}")


if __name__ == "__main__":
    main()
