"""``Concurrency``: how many runs of one workflow type may be active per key at once.

Declared with ``workflow(name, concurrency=Concurrency(max, key, on_limit))`` and checked
when declared, so a bad limit fails at import time. The engine enforces it
(``engine/runs/concurrency.py``, ADR 0025): a run holds one of ``max`` slot records of its key
from its start to its terminal status. Its two errors are in ``errors``, with every other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from weft_serverless.errors import InvalidArgumentError

OnLimit = Literal["reject", "queue"]
ON_LIMIT: tuple[str, ...] = ("reject", "queue")


def _whole_key(_input: Any) -> str:
    return ""


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``max`` active runs per ``key(input)`` (a string; one key for all when absent).

    ``on_limit="reject"`` makes a start beyond the limit raise
    ``WorkflowConcurrencyLimitExceededError``; ``"queue"`` stores the run ``pending`` and
    starts it, oldest first, when a slot of its key frees.
    """

    max: int
    key: Callable[[Any], str] = _whole_key
    on_limit: OnLimit = "reject"

    def __post_init__(self) -> None:
        if isinstance(self.max, bool) or not isinstance(self.max, int) or self.max < 1:
            raise InvalidArgumentError(
                f"Concurrency max must be a positive whole number, got {self.max!r}", "max"
            )
        if self.max > MAX_SLOTS:
            raise InvalidArgumentError(
                f"Concurrency max must be at most {MAX_SLOTS}, got {self.max}; a start reads "
                "every slot of its key",
                "max",
            )
        if not callable(self.key):
            raise InvalidArgumentError(
                f"Concurrency key must be a function of the input, got {self.key!r}", "key"
            )
        if self.on_limit not in ON_LIMIT:
            raise InvalidArgumentError(
                f"Concurrency on_limit must be one of {', '.join(ON_LIMIT)}, got {self.on_limit!r}",
                "on_limit",
            )


MAX_KEY_BYTES = 64
"""A key's UTF-8 bytes: with a 256-byte workflow type, an admit timer's sort key, which
holds both percent-encoded, still fits the smallest sort key of any backend (1,024 bytes)."""

MAX_SLOTS = 1000
"""A start reads every slot record of its key (one range read): this bounds that read."""
