"""Helpers for the Lambda runtime tests: synthetic events, a fake monotonic clock, replies.

API Gateway (REST, proxy integration) and EventBridge are never reached: handlers are
called as plain functions with the events those services would send.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from weft_serverless import lambda_events
from weft_serverless.aws import LocalContext

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


class FakeMonotonic:
    """A monotonic clock that moves only when its ``sleep`` is called (or ``advance``)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[float], object] | None = None

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, and by a microsecond at least: a real clock has
        moved when any sleep returns, so a wait of ``5e-324`` s (which ``now + seconds``
        would round away) still runs out."""
        self.sleeps.append(seconds)
        self.now += max(seconds, 1e-6)
        if self.on_sleep is not None:
            self.on_sleep(seconds)


def rest_event(
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    raw_body: str | None = None,
    base64: bool = False,
    shape: str = "rest",
) -> dict[str, Any]:
    """An API event, built by the same code ``weft dev`` uses: a REST proxy event (1.0), or
    with ``shape`` "http" or "function-url" the payload 2.0 event of those front doors."""
    text = raw_body if raw_body is not None else None if body is None else json.dumps(body)
    sent = {"Content-Type": "application/json", **(headers or {})}
    target = path + ("?" + urlencode(query) if query else "")
    encoded = (text or "").encode()
    if shape == "rest":
        event = lambda_events.rest_event(method, target, sent.items(), encoded)
    else:
        event = lambda_events.http_event(
            method, target, sent.items(), encoded, function_url=shape == "function-url"
        )
    event["requestContext"]["requestId"] = f"req-{uuid.uuid4().hex[:8]}"
    if text is None:
        event["body"] = None
    if base64:
        event["body"], event["isBase64Encoded"] = text, True
    return event


def scheduled_event(event_id: str = "evt-0001") -> dict[str, Any]:
    """What an EventBridge schedule rule sends its target."""
    return {**lambda_events.scheduled_event("us-east-1"), "id": event_id}


@dataclass
class Reply:
    """A handler's REST proxy response, decoded."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None


def reply_of(response: dict[str, Any]) -> Reply:
    headers = {k: v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers.update(response.get("headers") or {})
    return Reply(response["statusCode"], json.loads(response["body"]), headers)


class Api:
    """Calls an API handler the way API Gateway would, with a fresh context per request."""

    def __init__(
        self,
        handler: Handler,
        monotonic: FakeMonotonic,
        timeout: float = 29.0,
        shape: str = "rest",
    ) -> None:
        self.handler = handler
        self.monotonic = monotonic
        self.timeout = timeout
        self.shape = shape

    def context(self, timeout: float | None = None) -> LocalContext:
        return LocalContext(timeout if timeout is not None else self.timeout, self.monotonic)

    def __call__(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None, **kw: Any
    ) -> Reply:
        event = rest_event(method, path, body, shape=self.shape, **kw)
        return reply_of(self.handler(event, self.context(timeout)))


def table_items(client: Any, table: str) -> list[tuple[str, str, bytes]]:
    """Every item of ``table`` as ``(pk, sk, v)``, sorted: a before/after picture."""
    items: list[tuple[str, str, bytes]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        for item in page["Items"]:
            value = item.get("v", {}).get("B", b"")
            items.append((item["pk"]["S"], item["sk"]["S"], bytes(value)))
        if "LastEvaluatedKey" not in page:
            return sorted(items)
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects printed one per line (log lines and EMF documents)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def emf_documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in json_lines(text) if "_aws" in doc]


def log_lines(text: str) -> list[dict[str, Any]]:
    return [doc for doc in json_lines(text) if "_aws" not in doc and "message" in doc]
