"""The timer hint path on moto: the API's engine sends a delayed SQS message per timer it
arms, and the worker handler fires it from the stored timer (ADR 0054). Moto keeps delayed
messages hidden in real time, so the test reads what was sent from the client it wraps and
delivers it as the event source mapping would."""

from __future__ import annotations

from typing import Any

import aws_flows
import pytest
from aws_support import Api, FakeMonotonic

from weft_serverless import Engine, SqsTimerHints
from weft_serverless.aws import LocalContext, get_engine, make_api_handler, make_timer_hint_handler
from weft_serverless.aws.runtime import TIMER_HINTS_ENV, build_engine
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.testing import VirtualClock


class RecordingSqs:
    """A moto SQS client that keeps every ``SendMessageBatch`` entry it forwards."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.entries: list[dict[str, Any]] = []

    def send_message_batch(self, **kwargs: Any) -> Any:
        self.entries += kwargs["Entries"]
        return self.inner.send_message_batch(**kwargs)

    def deliver(self) -> dict[str, Any]:
        """The SQS event the mapping would hand the worker, for what was sent so far."""
        records = [
            {"messageId": f"m{n}", "body": entry["MessageBody"], "eventSource": "aws:sqs"}
            for n, entry in enumerate(self.entries)
        ]
        self.entries = []
        return {"Records": records}


@pytest.fixture
def sqs(moto: Any) -> RecordingSqs:
    return RecordingSqs(moto.client("sqs"))


@pytest.fixture
def queue(sqs: RecordingSqs) -> str:
    url: str = sqs.inner.create_queue(QueueName="weft-timer-hints")["QueueUrl"]
    return url


@pytest.fixture
def hinted(storage: DynamoDBStorage, clock: VirtualClock, sqs: RecordingSqs, queue: str) -> Engine:
    port = SqsTimerHints(queue, client=sqs, clock=clock)
    return get_engine(storage=storage, workflows=aws_flows.workflows, clock=clock, timer_hints=port)


def test_a_sleep_started_through_the_api_is_fired_by_the_worker_at_due(
    hinted: Engine, sqs: RecordingSqs, clock: VirtualClock, monotonic: FakeMonotonic
) -> None:
    api = Api(make_api_handler(sleep=monotonic.sleep, monotonic=monotonic), monotonic)
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n", "input": 5})
    assert [entry["DelaySeconds"] for entry in sqs.entries] == [5]
    event = sqs.deliver()
    worker = make_timer_hint_handler(wait=clock.advance)
    clock.advance(5.0)
    assert worker(event, LocalContext(30, monotonic)) == {"batchItemFailures": []}
    assert hinted.describe("n").status == "completed"
    # Delivered again (at least once): nothing to do, nothing fails.
    event["Records"][0]["messageId"] = "again"
    assert worker(event, LocalContext(30, monotonic)) == {"batchItemFailures": []}


def test_an_early_delivery_is_sent_again_with_the_delay_left(
    hinted: Engine, sqs: RecordingSqs, clock: VirtualClock, monotonic: FakeMonotonic
) -> None:
    hinted.start("napper", 30, id="n")
    event = sqs.deliver()
    clock.advance(10.0)
    worker = make_timer_hint_handler(wait=clock.advance)
    assert worker(event, LocalContext(30, monotonic)) == {"batchItemFailures": []}
    assert [entry["DelaySeconds"] for entry in sqs.entries] == [20]
    assert hinted.describe("n").status == "running"


def test_a_message_naming_no_timer_fails_alone(
    hinted: Engine, sqs: RecordingSqs, clock: VirtualClock, monotonic: FakeMonotonic
) -> None:
    hinted.start("napper", 1, id="n")
    event = sqs.deliver()
    event["Records"].append({"messageId": "bad", "body": '{"p": "wf#x", "s": "1"}'})
    clock.advance(1.0)
    worker = make_timer_hint_handler(wait=clock.advance)
    reply = worker(event, LocalContext(30, monotonic))
    assert reply == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    assert hinted.describe("n").status == "completed"


def test_the_queue_comes_from_the_environment(storage: DynamoDBStorage) -> None:
    engine = build_engine(
        {TIMER_HINTS_ENV: "https://sqs.example/123/q"},
        storage=storage,
        workflows=aws_flows.workflows,
    )
    port = engine.runtime.hints.port
    assert isinstance(port, SqsTimerHints) and port.queue_url == "https://sqs.example/123/q"
    engine.close()
