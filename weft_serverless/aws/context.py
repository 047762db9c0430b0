"""The slice of the Lambda context object the runtime reads, and a local stand-in for it.

Handlers only need a time budget and a few names for log lines, so they accept anything
shaped like ``LambdaContext``. ``LocalContext`` lets tests and ``weft dev`` call a handler
as Lambda would, with a deadline on an injectable clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class LambdaContext(Protocol):
    """What the runtime reads from Lambda's context object (a subset of its attributes)."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until Lambda stops this invocation."""
        ...


@dataclass
class LocalContext:
    """A Lambda context for running handlers outside Lambda.

    The deadline is ``timeout_seconds`` after construction on ``clock``; pass a fake clock
    to make the remaining time move only when a test says so.

    Args:
        timeout_seconds: The function timeout this invocation pretends to have.
        clock: Monotonic seconds; ``time.monotonic`` by default.
    """

    timeout_seconds: float = 29.0
    clock: Callable[[], float] = time.monotonic
    function_name: str = "weft-local"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:local:000000000000:function:weft-local"
    aws_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the pretend timeout, never negative."""
        return max(0, int((self.deadline - self.clock()) * 1000))
