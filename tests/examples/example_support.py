"""Calling the deployed handlers as API Gateway and EventBridge would, for the example tests.

The events come from ``weft_serverless.lambda_events`` (the builders ``weft dev`` uses for
real HTTP requests), so these tests also pin the event shape the dev server hands to Lambda code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from weft_serverless import Engine
from weft_serverless.aws import LocalContext
from weft_serverless.lambda_events import rest_event, scheduled_event
from weft_serverless.testing import VirtualClock

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class Reply:
    """A decoded REST proxy response."""

    status: int
    body: Any


@dataclass
class Stack:
    """The API and maintenance functions, their shared engine and the clock it reads."""

    api_handler: Handler
    maintenance_handler: Handler
    engine: Engine
    clock: VirtualClock

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
    ) -> Reply:
        """One API request, as a REST proxy event with a fresh Lambda context."""
        target = path + (f"?{urlencode(query)}" if query else "")
        raw = b"" if body is None else json.dumps(body).encode()
        headers = [("Content-Type", "application/json"), ("Accept", "application/json")]
        event = rest_event(method, target, headers, raw)
        response = self.api_handler(event, LocalContext(29.0, function_name="weft-api"))
        return Reply(response["statusCode"], json.loads(response["body"]))

    def start(self, workflow_type: str, workflow_id: str, input: Any) -> Reply:
        body = {"workflow_type": workflow_type, "id": workflow_id, "input": input}
        return self.call("POST", "/workflows", body)

    def maintain(self, advance: float = 0.0) -> dict[str, Any]:
        """Move the clock by ``advance`` seconds, then run one scheduled maintenance call."""
        if advance:
            self.clock.advance(advance)
        context = LocalContext(60.0, function_name="weft-maintenance")
        summary: dict[str, Any] = self.maintenance_handler(scheduled_event("us-east-1"), context)
        return summary

    def result(self, workflow_id: str) -> Reply:
        return self.call("GET", f"/workflows/{workflow_id}/result")

    def status(self, workflow_id: str) -> str:
        reply = self.call("GET", f"/workflows/{workflow_id}")
        assert reply.status == 200, reply.body
        return str(reply.body["status"])


def effects(printed: str) -> list[str]:
    """The side-effect lines the example activities printed (``  [service] what``)."""
    return [line.strip() for line in printed.splitlines() if line.startswith("  [")]
