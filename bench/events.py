"""Cost of the events outbox per published event, measured on moto with the request meter.

Runs the same workload (N one-step runs that complete) with and without an
``EventBridgeSink`` and prints, per event: the extra DynamoDB requests and write units its
outbox item adds to the terminal batch (which already held several items), and what one
maintenance pass spends to publish it (outbox reads, conditional deletes, PutEvents calls).
Run: ``python bench/events.py``.
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

from weft_serverless import Engine, EventBridgeSink, workflow

RUNS = 50
EVENTS_PRICE_USD = 1.00 / 1e6
"""EventBridge custom events: $1.00 per million PutEvents entries (each 64 KB chunk)."""


def one(ctx, x):  # type: ignore[no-untyped-def]
    return (yield ctx.run("step", x))


DEFINITION = workflow("one").activities(step=lambda x: x).execute(one)


class CountingEvents:
    """An events client that counts PutEvents calls and entries."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self.entries = inner, 0, 0

    def put_events(self, **kwargs: Any) -> Any:
        self.calls += 1
        self.entries += len(kwargs["Entries"])
        return self.inner.put_events(**kwargs)


def measure(sink: EventBridgeSink | None, name: str) -> tuple[Any, Any]:
    import boto3

    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    client = boto3.client("dynamodb", region_name="us-east-1")
    create_table(client, name)
    storage = DynamoDBStorage(name, client=client)
    engine = Engine.create(
        storage, {"one": DEFINITION}, background_tasks="manual", recover=False, events=sink
    )
    before = storage.meter.snapshot()
    for n in range(RUNS):
        engine.start("one", n, id=f"run-{n}")
    runs = storage.meter.snapshot() - before
    before = storage.meter.snapshot()
    engine.run_maintenance()
    passed = storage.meter.snapshot() - before
    engine.close()
    return runs, passed


def main() -> None:
    import boto3
    from moto import mock_aws

    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        events.create_event_bus(Name="weft")
        counting = CountingEvents(events)
        plain_runs, plain_pass = measure(None, "weft-events-none")
        sink_runs, sink_pass = measure(EventBridgeSink("weft", client=counting), "weft-events")
    write_req = (sink_runs.requests - plain_runs.requests) / RUNS
    write_wru = (sink_runs.write_units - plain_runs.write_units) / RUNS
    pub_req = (sink_pass.requests - plain_pass.requests) / RUNS
    pub_wru = (sink_pass.write_units - plain_pass.write_units) / RUNS
    pub_rru = (sink_pass.read_units - plain_pass.read_units) / RUNS
    print(f"events outbox on moto: {RUNS} runs, one terminal event each")
    print(f"{'':<34}{'requests':>9}{'WRU':>7}{'RRU':>7}")
    print(f"{'written with the terminal batch':<34}{write_req:>9.2f}{write_wru:>7.2f}{0:>7.2f}")
    print(f"{'published by a maintenance pass':<34}{pub_req:>9.2f}{pub_wru:>7.2f}{pub_rru:>7.2f}")
    print(f"PutEvents: {counting.calls} calls for {counting.entries} entries")
    ddb = (write_wru + pub_wru) * 0.625e-6 + pub_rru * 0.125e-6
    total = ddb + EVENTS_PRICE_USD
    print(f"$ per million events: DynamoDB {ddb * 1e6:.2f} + EventBridge 1.00 = {total * 1e6:.2f}")


if __name__ == "__main__":
    main()
