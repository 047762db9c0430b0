"""Run events in ``weft dev``: a bus on the local moto server, and a sink that prints.

Both engines of the dev server write the events outbox (``WEFT_EVENT_BUS``, as deployed);
the maintenance engine publishes it to the bus on moto with ``PutEvents`` and prints each
event EventBridge accepted, so a developer sees what a rule on the real bus would receive.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from weft_serverless import EventBridgeSink

DEV_BUS = "weft-dev-events"
EVENT_BUS_ENV = "WEFT_EVENT_BUS"  # weft_serverless.aws.runtime reads it
ENDPOINT_ENV = "AWS_ENDPOINT_URL_EVENTBRIDGE"  # boto3's per-service endpoint override


def setup(endpoint: str, region: str) -> str:
    """Point EventBridge clients at moto, create the bus, name it for the engines."""
    import boto3

    os.environ[ENDPOINT_ENV] = endpoint
    bus = os.environ.setdefault(EVENT_BUS_ENV, DEV_BUS)
    client = boto3.client("events", region_name=region, endpoint_url=endpoint)
    if bus != "default":
        client.create_event_bus(Name=bus)
    return bus


class PrintedSink(EventBridgeSink):
    """An ``EventBridgeSink`` that prints every event the bus accepted."""

    def __init__(self, bus_name: str, log: Callable[[str], None]) -> None:
        super().__init__(bus_name)
        self._log = log

    def publish(self, events: Sequence[Mapping[str, Any]]) -> list[bool]:
        accepted = super().publish(events)
        for event, ok in zip(events, accepted, strict=True):
            if ok:
                self._log(f"event {event['type']} {event['workflow_id']} ({event['event_id']})")
        return accepted
