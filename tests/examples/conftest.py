"""Fixtures for the example tests: the deployed handlers on a moto table and a virtual clock.

Each test gets a fresh table and a fresh "container": the engine the handlers share is
pre-built (``get_engine``) with the test's storage, the example registry and a virtual
clock, so timers fall due when the test advances the clock, never by sleeping.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dynamodb_support import MotoEnvironment, dynamodb_table, moto
from example_support import Stack

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # examples/ and handlers/ live at the repository root
    sys.path.insert(0, str(REPO))

from examples.workflows import workflows  # noqa: E402
from weft_serverless.aws import get_engine, reset_engine  # noqa: E402
from weft_serverless.aws.logs import ENGINE_LOGGER  # noqa: E402
from weft_serverless.storage.dynamodb import DynamoDBStorage  # noqa: E402
from weft_serverless.testing import VirtualClock  # noqa: E402

__all__ = ["dynamodb_table", "moto"]


@pytest.fixture
def stack(
    moto: MotoEnvironment, dynamodb_table: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stack]:
    """The API and maintenance handlers on a fresh table, sharing one engine on a virtual clock."""
    import handlers.api
    import handlers.maintenance

    engine_logger = logging.getLogger(ENGINE_LOGGER)
    saved = (list(engine_logger.handlers), engine_logger.level, engine_logger.propagate)
    for name in ("WEFT_MAINTENANCE_TICK_SECONDS", "WEFT_STEP_RESERVE_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "weft-examples")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    clock = VirtualClock()
    reset_engine()
    storage = DynamoDBStorage(dynamodb_table, client=moto.client())
    engine = get_engine(storage=storage, workflows=workflows, clock=clock)
    yield Stack(handlers.api.handler, handlers.maintenance.handler, engine, clock)
    reset_engine(close=True)
    engine_logger.handlers, engine_logger.level, engine_logger.propagate = saved
