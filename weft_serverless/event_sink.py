"""Where a run's terminal and failure events go: the ``EventSink`` shape and EventBridge.

The engine writes an event to its outbox in the same batch as the change it reports, and a
maintenance pass hands the outbox to the sink (docs/decisions/0032-events.md). A sink only
publishes: it answers, per event, whether it was accepted, so the pass deletes exactly the
accepted ones and keeps the rest for the next pass (at least once). boto3 is imported only
when an ``EventBridgeSink`` without a client publishes for the first time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from weft_serverless.errors import InvalidArgumentError

MAX_ENTRIES_PER_CALL = 10
"""PutEvents takes at most 10 entries a call."""
MAX_BYTES_PER_CALL = 256 * 1024
"""PutEvents takes at most 256 KB a call, counted as EventBridge counts entry sizes."""


@runtime_checkable
class EventSink(Protocol):
    """Publishes events; ``publish`` returns one flag per event: accepted or not.

    ``max_batch`` and ``max_bytes`` bound one call; an event is a JSON-able mapping whose
    ``event_id`` consumers deduplicate on (a retried publish repeats it)."""

    max_batch: int
    max_bytes: int

    def publish(self, events: Sequence[Mapping[str, Any]]) -> list[bool]: ...

    def size_of(self, event: Mapping[str, Any]) -> int: ...


class EventBridgeSink:
    """Publishes to an Amazon EventBridge bus with ``PutEvents``.

    ``bus_name`` is the bus name or ARN (``"default"`` for the account's default bus);
    ``client`` a boto3 ``events`` client (built on first use when omitted); every event
    goes out with ``Source=source`` and ``DetailType="weft " + event type``
    (``weft run.failed``), its fields as the JSON ``Detail``. A partial failure
    (``FailedEntryCount``) marks exactly the entries that carry an ``ErrorCode``.
    """

    max_batch = MAX_ENTRIES_PER_CALL
    max_bytes = MAX_BYTES_PER_CALL

    def __init__(self, bus_name: str, client: Any = None, *, source: str = "weft") -> None:
        if not isinstance(bus_name, str) or not bus_name:
            raise InvalidArgumentError("EventBridgeSink needs a bus name or ARN, e.g. 'default'")
        if not isinstance(source, str) or not source or source.startswith("aws."):
            raise InvalidArgumentError(
                "EventBridgeSink's source must be non-empty text not starting with 'aws.'"
            )
        self.bus_name = bus_name
        self.source = source
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3

                self._client = boto3.client("events")
            return self._client

    def entry(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The ``PutEvents`` entry of one event."""
        return {
            "Source": self.source,
            "DetailType": f"weft {event['type']}",
            # default=str: a value JSON cannot hold (bytes in an error) must not make the
            # event unpublishable, or it would be kept and retried by every pass
            "Detail": json.dumps(event, separators=(",", ":"), sort_keys=True, default=str),
            "EventBusName": self.bus_name,
        }

    def size_of(self, event: Mapping[str, Any]) -> int:
        """The entry's size as EventBridge counts it (source, detail type, detail, plus 14
        bytes for the time field)."""
        entry = self.entry(event)
        return 14 + sum(len(entry[name].encode()) for name in ("Source", "DetailType", "Detail"))

    def publish(self, events: Sequence[Mapping[str, Any]]) -> list[bool]:
        if not events:
            return []
        response = self.client.put_events(Entries=[self.entry(event) for event in events])
        answers = response.get("Entries") or []
        if not response.get("FailedEntryCount"):
            return [True] * len(events)
        return [
            index < len(answers) and not answers[index].get("ErrorCode")
            for index in range(len(events))
        ]
