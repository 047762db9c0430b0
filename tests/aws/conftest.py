"""Fixtures for the Lambda runtime tests: a moto table, a virtual clock, built handlers.

Every test starts and ends without a cached engine (``reset_engine``), and the logging
routing that ``get_logger`` installs on ``weft_serverless`` is undone afterwards, so other
test folders still see engine log records through ``caplog``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import aws_flows
import pytest
from aws_support import Api, FakeMonotonic
from dynamodb_support import MotoEnvironment, dynamodb_table, moto, moto_server

from weft_serverless import Engine
from weft_serverless.aws import (
    get_engine,
    logs,
    make_api_handler,
    make_maintenance_handler,
    reset_engine,
)
from weft_serverless.aws.logs import ENGINE_LOGGER
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.testing import VirtualClock

__all__ = ["dynamodb_table", "moto", "moto_server"]


@pytest.fixture(autouse=True)
def _fresh_container(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    engine_logger = logging.getLogger(ENGINE_LOGGER)
    saved = (list(engine_logger.handlers), engine_logger.level, engine_logger.propagate)
    for name in ("WEFT_MAINTENANCE_TICK_SECONDS", "WEFT_STEP_RESERVE_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "weft-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "WeftTest")
    monkeypatch.setattr(logs, "_logger", None)  # rebuilt under this environment
    aws_flows.reset()
    reset_engine()
    yield
    reset_engine()
    engine_logger.handlers, engine_logger.level, engine_logger.propagate = (
        saved[0],
        saved[1],
        saved[2],
    )


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def monotonic() -> FakeMonotonic:
    return FakeMonotonic()


@pytest.fixture
def client(moto: MotoEnvironment) -> Any:
    return moto.client()


@pytest.fixture
def storage(client: Any, dynamodb_table: str) -> DynamoDBStorage:
    return DynamoDBStorage(dynamodb_table, client=client)


@pytest.fixture
def engine(storage: DynamoDBStorage, clock: VirtualClock) -> Engine:
    """The container's engine, pre-built with the test's storage and clock."""
    return get_engine(storage=storage, workflows=aws_flows.workflows, clock=clock)


@pytest.fixture
def api(engine: Engine, monotonic: FakeMonotonic) -> Api:
    handler = make_api_handler(sleep=monotonic.sleep, monotonic=monotonic)
    return Api(handler, monotonic)


@pytest.fixture
def maintenance(engine: Engine, monotonic: FakeMonotonic) -> Any:
    return make_maintenance_handler(tick_seconds=0, sleep=monotonic.sleep, monotonic=monotonic)
