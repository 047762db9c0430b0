"""Events the bus never takes leave the outbox: after ``MAX_PUBLISH_TRIES`` refusals (at once
when no call may carry them) they move to the event dead letters, which are listed and
counted in the metric the construct alarms on, while every other event is published as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from dynamodb_support import moto_environment
from feature_support import Opener, make_engine
from test_events_outbox_kinds import Received

from weft_serverless import EventBridgeSink, RetryPolicy, workflow
from weft_serverless.aws.metrics import InvocationMetrics, Snapshot
from weft_serverless.engine.runs.outbox import MAX_PUBLISH_TRIES
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage

pytestmark = pytest.mark.backends("memory", "sqlite", "dynamodb")


@pytest.fixture
def bus(request: pytest.FixtureRequest) -> Iterator[Received]:
    env = moto_environment(request.config)
    received = Received(env.client("events"), env.client("sqs"))
    yield received
    received.close()


class RefusesOneRun:
    """An events client on which EventBridge refuses, entry by entry, every event of one run
    (as it does an entry it will never take) and accepts the others."""

    def __init__(self, inner: Any, workflow_id: str) -> None:
        self.inner, self.workflow_id = inner, workflow_id
        self.offered: list[str] = []  # workflow ids of the entries of every call

    def put_events(self, Entries: list[dict[str, Any]]) -> Any:
        ids = [json.loads(entry["Detail"])["workflow_id"] for entry in Entries]
        self.offered += ids
        passed = [e for e, wid in zip(Entries, ids, strict=True) if wid != self.workflow_id]
        answer = iter(self.inner.put_events(Entries=passed)["Entries"] if passed else [])
        refused = {"ErrorCode": "InvalidArgument", "ErrorMessage": "not this one"}
        out = [refused if wid == self.workflow_id else next(answer) for wid in ids]
        return {"FailedEntryCount": ids.count(self.workflow_id), "Entries": out}


def _flows() -> dict[str, Any]:
    def fails(message: str) -> None:
        raise ValueError(message)

    def body(ctx: Any, message: str | None) -> Any:
        if message is not None:
            yield ctx.run("fails", message, retry=RetryPolicy(max_attempts=1))
        return "done"

    return {"w": workflow("w").activities(fails=fails).execute(body)}


def _outbox(storage: Storage) -> list[str]:
    return [
        sort
        for shard in range(keys.OUTBOX_SHARDS)
        for sort, _ in storage.scan(keys.outbox_partition(shard))
    ]


def test_an_event_the_bus_always_refuses_is_dead_lettered_after_bounded_tries(
    storage_factory: Opener, bus: Received
) -> None:
    client = RefusesOneRun(bus.events, "bad")
    te = make_engine(storage_factory, _flows(), events=EventBridgeSink(bus.name, client=client))
    te.start("w", None, id="bad")
    te.start("w", None, id="good-1")
    report = te.advance(0)
    assert report.parts == {**report.parts, "events_published": 1, "events_kept": 1}
    te.start("w", None, id="good-2")  # later events still go out while the bad one waits
    before = Snapshot.of(te.engine)
    for _ in range(MAX_PUBLISH_TRIES - 2):
        assert te.advance(0).parts.get("events_dead_lettered") is None
    assert len(_outbox(te.storage)) == 1
    last = te.advance(0)
    assert last.parts == {**last.parts, "events_dead_lettered": 1, "events_kept": 0}
    assert _outbox(te.storage) == []
    assert client.offered.count("bad") == MAX_PUBLISH_TRIES
    assert sorted(d["workflow_id"] for d in bus.details()) == ["good-1", "good-2"]
    [letter] = te.engine.list_event_dead_letters()
    assert letter["event"] == te.engine.events("bad")[-1]
    assert (letter["tries"], letter["error"]) == (MAX_PUBLISH_TRIES, "refused by the sink")
    assert letter["first_refused_at"] <= letter["at"]
    assert te.engine.list_event_dead_letters("bad") == [letter]
    assert te.engine.list_event_dead_letters("good-1") == []
    counts = InvocationMetrics.between(before, Snapshot.of(te.engine)).counts
    assert counts["EventsDeadLettered"] == 1  # infra's EventsDeadLettered alarm watches it
    te.advance(0)
    assert client.offered.count("bad") == MAX_PUBLISH_TRIES  # never offered again
    te.purge("bad")
    assert te.engine.list_event_dead_letters("bad") == [letter]  # it outlives its run


class SmallCalls(EventBridgeSink):
    """A sink whose calls carry 400 bytes: a long failure's event fits in none."""

    max_bytes = 400


def test_an_event_no_call_may_carry_is_dead_lettered_at_once(
    storage_factory: Opener, bus: Received
) -> None:
    client = RefusesOneRun(bus.events, "nobody")
    sink = SmallCalls(bus.name, client=client)
    te = make_engine(storage_factory, _flows(), events=sink)
    te.start("w", "x" * 500, id="long")
    te.start("w", None, id="short")
    report = te.advance(0)
    assert report.parts == {**report.parts, "events_published": 1, "events_dead_lettered": 1}
    assert client.offered == ["short"]  # the long one was never sent
    [letter] = te.engine.list_event_dead_letters()
    assert letter["event"]["workflow_id"] == "long" and letter["tries"] == 0
    assert letter["error"].endswith("over the 400 one call may carry")
    assert sink.size_of(letter["event"]) > 400
    assert _outbox(te.storage) == []
