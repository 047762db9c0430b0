"""``WEFT_EVENT_BUS``: the Lambda runtime's engine writes an events outbox for that bus."""

from __future__ import annotations

import pytest

from weft_serverless import EventBridgeSink, MemoryStorage
from weft_serverless.aws.runtime import build_engine


@pytest.fixture
def from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEFT_WORKFLOWS_MODULE", "aws_flows")
    monkeypatch.delenv("WEFT_OWNERSHIP", raising=False)


def test_the_event_bus_comes_from_the_environment(
    from_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEFT_EVENT_BUS", "weft-events")
    sink = build_engine(storage=MemoryStorage()).runtime.events
    assert isinstance(sink, EventBridgeSink) and sink.bus_name == "weft-events"


def test_without_the_variable_there_is_no_sink(
    from_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEFT_EVENT_BUS", raising=False)
    assert build_engine(storage=MemoryStorage()).runtime.events is None
