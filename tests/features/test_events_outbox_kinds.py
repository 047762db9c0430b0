"""Which changes put an event in the outbox, each in the batch of the change itself.

A cancel and a time-out from outside, a finalizer's dead letter, and a retried attempt's
failure are each published once; a crash just before the retry record's batch lands leaves
neither the record nor its event, and the recovered drive writes both once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from dynamodb_support import moto_environment
from feature_support import Opener, crashable_engine, expect_crash, make_engine, recover_fresh

from weft_serverless import EventBridgeSink, RetryPolicy, WorkflowContext, workflow
from weft_serverless.storage import keys


class Received:
    """A moto EventBridge bus whose rule copies every weft event into an SQS queue."""

    def __init__(self, events: Any, sqs: Any) -> None:
        self.events, self.sqs = events, sqs
        self.name = f"weft-{uuid.uuid4().hex[:12]}"
        events.create_event_bus(Name=self.name)
        self.queue = sqs.create_queue(QueueName=self.name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.queue, AttributeNames=["QueueArn"])
        pattern = json.dumps({"source": ["weft"]})
        events.put_rule(Name="all", EventBusName=self.name, EventPattern=pattern)
        target = {"Id": "q", "Arn": arn["Attributes"]["QueueArn"]}
        events.put_targets(Rule="all", EventBusName=self.name, Targets=[target])

    def details(self) -> list[dict[str, Any]]:
        out = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10)
            if not got.get("Messages"):
                return out
            for message in got["Messages"]:
                out.append(json.loads(message["Body"])["detail"])
                self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])

    def close(self) -> None:
        self.events.remove_targets(Rule="all", EventBusName=self.name, Ids=["q"])
        self.events.delete_rule(Name="all", EventBusName=self.name)
        self.events.delete_event_bus(Name=self.name)
        self.sqs.delete_queue(QueueUrl=self.queue)


@pytest.fixture
def bus(request: pytest.FixtureRequest) -> Iterator[Received]:
    env = moto_environment(request.config)
    received = Received(env.client("events"), env.client("sqs"))
    yield received
    received.close()


def _waits(ctx: WorkflowContext, _: Any) -> Any:
    yield ctx.sleep("1h")


def test_cancel_and_time_out_from_outside(storage_factory: Opener, bus: Received) -> None:
    te = make_engine(
        storage_factory,
        {"w": workflow("w").execute(_waits)},
        events=EventBridgeSink(bus.name, client=bus.events),
    )
    te.start("w", id="c")
    te.start("w", id="t", execution_timeout=10)
    te.cancel("c")
    te.advance(10)
    te.advance(0)
    got = sorted((d["workflow_id"], d["type"]) for d in bus.details())
    assert got == [("c", "run.cancelled"), ("t", "run.timed-out")]
    for workflow_id in ("c", "t"):
        assert te.engine.events(workflow_id)[-1]["type"] in ("run.cancelled", "run.timed-out")


def test_a_dead_lettered_finalizer_is_published(storage_factory: Opener, bus: Received) -> None:
    def flow(ctx: WorkflowContext, _: Any) -> Any:
        ctx.on_cancel("release_hold", 9, retry=RetryPolicy(max_attempts=1))
        yield ctx.sleep("1h")

    def down(order: int) -> None:
        raise RuntimeError("hold service down")

    te = make_engine(
        storage_factory,
        {"d": workflow("d").activities(release_hold=down).execute(flow)},
        events=EventBridgeSink(bus.name, client=bus.events),
    )
    te.start("d", id="d")
    te.cancel("d")
    te.advance(0)
    details = {d["type"]: d for d in bus.details()}
    assert set(details) == {"run.cancelled", "finalizer.dead_lettered"}
    letter = details["finalizer.dead_lettered"]
    assert (letter["workflow_id"], letter["activity"], letter["attempts"]) == (
        "d",
        "release_hold",
        1,
    )
    assert letter["error"]["message"] == "hold service down"
    assert letter["event_id"] != details["run.cancelled"]["event_id"]


def _flaky(ctx: WorkflowContext, x: int) -> Any:
    return (yield ctx.run("flaky", x, retry=RetryPolicy(max_attempts=2, initial_backoff=1)))


def test_crash_before_the_retry_batch_lands_writes_record_and_event_once(
    storage_factory: Opener, bus: Received
) -> None:
    calls: list[int] = []

    def flaky(x: int) -> int:
        calls.append(x)
        if len(calls) < 3:
            raise ValueError("down")
        return x

    flows = {"f": workflow("f").activities(flaky=flaky).execute(_flaky)}
    sink = EventBridgeSink(bus.name, client=bus.events)
    te, crash = crashable_engine(storage_factory, flows, events=sink)
    crash.arm(lambda key: key.partition.startswith("outbox#"), after=False)
    with expect_crash():
        te.start("f", 5, id="f")
    store = storage_factory()
    assert [sort for sort, _ in store.scan(keys.workflow_partition("f"), keys.ATTEMPT_PREFIX)] == []
    engine = recover_fresh(te, storage_factory)  # attempt 1 runs again and fails again
    engine.run_maintenance()
    [detail] = bus.details()
    assert (detail["type"], detail["attempt"]) == ("activity.attempt_failed", 1)
    assert [e["type"] for e in engine.events("f")] == ["run.started", "activity.attempt_failed"]
