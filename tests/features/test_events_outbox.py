"""The events outbox, published to moto's EventBridge by ``run_maintenance``.

Rules pinned here (docs/decisions/0032-events.md): with an ``EventBridgeSink``, a run's
terminal event and its failed attempts are written in the batch of the change they report
and published by the next maintenance pass, once per event id (at least once across a crash:
then again with the same id); entries EventBridge refuses stay for the next pass; a deposed
lease holder publishes nothing; without a sink nothing is written, and the steps of a run
cost the same with a sink as without.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from dynamodb_support import moto_environment
from feature_support import Opener, crashable_engine, expect_crash, make_engine, recover_fresh

from weft_serverless import ConfigurationError, Engine, EventBridgeSink, RetryPolicy, workflow
from weft_serverless.engine.runs import outbox
from weft_serverless.errors import EngineLeaseLostError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import SimulatedCrash, VirtualClock


@dataclass
class Bus:
    """A fresh EventBridge bus on moto whose rule copies every weft event into an SQS queue."""

    name: str
    events: Any
    sqs: Any
    queue: str

    def sink(self, client: Any = None) -> EventBridgeSink:
        return EventBridgeSink(self.name, client=client or self.events)

    def received(self) -> list[dict[str, Any]]:
        """The details of the events delivered since the last call."""
        out: list[dict[str, Any]] = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10)
            messages = got.get("Messages", [])
            if not messages:
                return out
            for message in messages:
                body = json.loads(message["Body"])
                assert body["source"] == "weft"
                assert body["detail-type"] == f"weft {body['detail']['type']}"
                out.append(body["detail"])
                self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])


@pytest.fixture
def bus(request: pytest.FixtureRequest, storage_backend: str) -> Iterator[Bus]:
    env = moto_environment(request.config)
    http = storage_backend == "dynamodb-http"
    if http:
        env.start_server()
    events, sqs = env.client("events", http=http), env.client("sqs", http=http)
    name = f"weft-{uuid.uuid4().hex[:12]}"
    events.create_event_bus(Name=name)
    queue = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    events.put_rule(Name="all", EventBusName=name, EventPattern=json.dumps({"source": ["weft"]}))
    events.put_targets(
        Rule="all",
        EventBusName=name,
        Targets=[{"Id": "q", "Arn": arn["Attributes"]["QueueArn"]}],
    )
    yield Bus(name, events, sqs, queue)
    events.remove_targets(Rule="all", EventBusName=name, Ids=["q"])
    events.delete_rule(Name="all", EventBusName=name)
    events.delete_event_bus(Name=name)
    sqs.delete_queue(QueueUrl=queue)


def _flow(ctx: Any, x: int) -> Any:
    a = yield ctx.run("double", x)
    b = yield ctx.run("double", a)
    return b


def _flaky_flow(ctx: Any, x: int) -> Any:
    return (yield ctx.run("flaky", x, retry=RetryPolicy(max_attempts=2, initial_backoff=1)))


def _flows() -> dict[str, Any]:
    def flaky(x: int) -> int:
        raise ValueError(f"no {x}")

    return {
        "flow": workflow("flow").activities(double=lambda x: x * 2).execute(_flow),
        "flaky": workflow("flaky").activities(flaky=flaky).execute(_flaky_flow),
    }


def outbox_items(storage: Storage) -> list[tuple[str, bytes]]:
    return [
        pair
        for shard in range(keys.OUTBOX_SHARDS)
        for pair in storage.scan(keys.outbox_partition(shard))
    ]


def test_terminal_event_is_published_once(storage_factory: Opener, bus: Bus) -> None:
    te = make_engine(storage_factory, _flows(), events=bus.sink())
    assert te.start("flow", 1, id="w").result() == 4
    assert len(outbox_items(te.storage)) == 1
    assert bus.received() == []  # published by a maintenance pass, not inline
    report = te.advance(0)
    assert report.parts["events_published"] == 1
    [detail] = bus.received()
    assert detail == te.engine.events("w")[-1]  # the log's terminal event, id and all
    assert detail["type"] == "run.completed" and detail["workflow_id"] == "w"
    assert outbox_items(te.storage) == []
    assert "events_published" not in te.advance(0).parts
    assert bus.received() == []


def test_failures_are_published_with_their_attempt(storage_factory: Opener, bus: Bus) -> None:
    te = make_engine(storage_factory, _flows(), events=bus.sink())
    te.start("flaky", 7, id="f")
    te.advance(1)  # attempt 2 fails for good, and so does the run
    te.advance(0)
    details = bus.received()
    assert [(d["type"], d.get("attempt")) for d in details] == [
        ("activity.attempt_failed", 1),
        ("run.failed", None),
    ]
    log = {e["event_id"]: e for e in te.engine.events("f")}
    assert all(log[d["event_id"]] == d for d in details)
    traceback = details[0]["error"].pop("traceback")  # where it raised, bounded (ADR 0044)
    assert details[0]["error"] == {"type": "ValueError", "message": "no 7"}
    assert traceback.endswith("ValueError: no 7\n") and ", in flaky\n" in traceback
    assert details[1]["error"]["type"] == "ActivityFailedError"


def test_crash_after_the_terminal_commit_is_published_by_the_next_pass(
    storage_factory: Opener, bus: Bus
) -> None:
    te, crash = crashable_engine(storage_factory, _flows(), events=bus.sink())
    crash.arm(lambda key: key.partition.startswith("outbox#"), after=True)
    with expect_crash():
        te.start("flow", 1, id="w")
    engine = recover_fresh(te, storage_factory)
    assert engine.describe("w").status == "completed"
    engine.run_maintenance()
    [detail] = bus.received()
    assert detail["type"] == "run.completed"
    assert outbox_items(te.storage) == []


class _DiesAfterPublishing:
    """An events client whose process dies right after EventBridge accepted the events."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def put_events(self, **kwargs: Any) -> Any:
        self.inner.put_events(**kwargs)
        raise SimulatedCrash("died before deleting what was published")


def test_crash_between_publish_and_delete_publishes_again_with_the_same_id(
    storage_factory: Opener, bus: Bus
) -> None:
    te = make_engine(storage_factory, _flows(), events=bus.sink(_DiesAfterPublishing(bus.events)))
    te.start("flow", 1, id="w")
    with pytest.raises(SimulatedCrash):
        te.advance(0)
    first = bus.received()
    te.crash()
    te._engine_options["events"] = bus.sink()
    te.recover(storage_factory())
    te.advance(0)
    again = bus.received()
    assert len(first) == len(again) == 1
    assert first[0]["event_id"] == again[0]["event_id"]  # consumers deduplicate on it
    assert outbox_items(te.storage) == []


class _RefusesFirst:
    """An events client on which EventBridge refuses the first ``n`` entries once."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0

    def put_events(self, Entries: list[dict[str, Any]]) -> Any:
        self.calls += 1
        refused, passed = Entries[: self.n], Entries[self.n :]
        self.n = 0
        answer = self.inner.put_events(Entries=passed) if passed else {"Entries": []}
        failed = [{"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"}] * len(refused)
        return {"FailedEntryCount": len(refused), "Entries": failed + answer["Entries"]}


@pytest.mark.backends("memory", "dynamodb")
def test_refused_entries_stay_for_the_next_pass(storage_factory: Opener, bus: Bus) -> None:
    client = _RefusesFirst(bus.events, 2)
    te = make_engine(storage_factory, _flows(), events=bus.sink(client))
    for n in range(12):
        te.start("flow", n, id=f"w{n:02d}")
    report = te.advance(0)
    assert report.parts == {**report.parts, "events_published": 10, "events_kept": 2}
    assert client.calls == 2  # 12 events: calls of at most 10 entries
    assert len(bus.received()) == 10
    assert len(outbox_items(te.storage)) == 2
    te.advance(0)
    assert len(bus.received()) == 2
    assert outbox_items(te.storage) == []


def test_deposed_lease_holder_publishes_nothing(storage_factory: Opener, bus: Bus) -> None:
    clock = VirtualClock()
    flows = _flows()

    def engine(name: str) -> Engine:
        return Engine.create(
            storage_factory(),
            flows,
            ownership="lease",
            background_tasks="manual",
            clock=clock,
            engine_id=name,
            events=bus.sink(),
            max_clock_skew=math.inf,
        )

    e1 = engine("e1")
    e1.start("flow", 1, id="w")  # its terminal event waits in the outbox
    clock.advance(31)  # e1 paused past its lease; e2 takes the store over
    e2 = engine("e2")
    with pytest.raises(EngineLeaseLostError):
        outbox.publish(e1.runtime)  # even a pass that did not renew first
    with pytest.raises(ConfigurationError):
        e1.run_maintenance()  # it stopped itself
    assert bus.received() == []
    e2.run_maintenance()
    assert [d["workflow_id"] for d in bus.received()] == ["w"]


def test_without_a_sink_nothing_is_written_and_steps_cost_the_same(
    storage_factory: Opener, bus: Bus
) -> None:
    plain = make_engine(storage_factory, _flows())
    plain.storage.stats.reset()
    plain.start("flaky", 1, id="a")  # attempt 1 fails: a retry record
    plain.start("flow", 1, id="b")  # two steps, then completed
    without = plain.storage.stats.snapshot()
    plain.advance(1)  # attempt 2 fails, so does the run
    assert plain.advance(0).parts.get("events_published") is None
    assert outbox_items(plain.storage) == []
    sinked = make_engine(storage_factory, _flows(), events=bus.sink())
    sinked.storage.stats.reset()
    sinked.start("flaky", 1, id="c")
    sinked.start("flow", 1, id="d")
    with_sink = sinked.storage.stats.snapshot()
    # The same requests: the two events ride in batches that already held several items
    # (the retry record with its timer, the terminal move with its status index).
    assert len(outbox_items(sinked.storage)) == 2
    assert with_sink["batches"] == without["batches"]
    assert with_sink["conditional_batches"] == without["conditional_batches"]
    assert with_sink["gets"] == without["gets"] and with_sink["scans"] == without["scans"]
    assert with_sink["items_written"] == without["items_written"] + 2


def test_the_sink_turns_an_event_into_a_put_events_entry() -> None:
    sink = EventBridgeSink("my-bus")
    event = {"event_id": "e1", "type": "run.failed", "error": {"raw": b"\x00"}}
    entry = sink.entry(event)
    assert entry["Source"] == "weft" and entry["DetailType"] == "weft run.failed"
    assert entry["EventBusName"] == "my-bus"
    assert json.loads(entry["Detail"])["error"] == {"raw": "b'\\x00'"}
    size = len("weft") + len("weft run.failed") + len(entry["Detail"]) + 14
    assert sink.size_of(event) == size


def test_bad_sinks_and_bus_names_are_typed_errors() -> None:
    from weft_serverless import InvalidArgumentError, MemoryStorage

    for bad in ("", None):
        with pytest.raises(InvalidArgumentError):
            EventBridgeSink(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        EventBridgeSink("bus", source="aws.events")
    with pytest.raises(InvalidArgumentError) as raised:
        Engine.create(MemoryStorage(), _flows(), events="my-bus")  # type: ignore[arg-type]
    assert raised.value.field == "events"
