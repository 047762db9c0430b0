"""A finalizer registration (``ctx.on_cancel``) and its stored record.

A finalizer is an activity and its input, recorded while the run is live, that the engine
runs at least once if the run ends cancelled or timed out (or failed, with ``on_failure``).
The record holds everything the teardown needs, including the retry policy, because the
teardown may run on another engine, after a crash, long after the workflow code ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from weft_serverless.commands import RetryPolicy


@dataclass(frozen=True, slots=True)
class Finalizer:
    """One ``ctx.on_cancel`` call: ``input`` is already encoded (size checked at the call)."""

    activity: str
    input: bytes
    on_failure: bool
    retry: RetryPolicy

    def to_record(self) -> dict[str, Any]:
        r = self.retry
        return {
            "act": self.activity,
            "v": self.input,
            "onf": self.on_failure,
            "retry": [
                r.max_attempts,
                r.initial_backoff,
                r.backoff_multiplier,
                r.max_backoff,
                [_name(entry) for entry in r.non_retryable],
            ],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Finalizer:
        attempts, initial, multiplier, cap, names = record["retry"]
        retry = RetryPolicy(attempts, initial, multiplier, cap, tuple(names))
        return cls(record["act"], record["v"], bool(record.get("onf")), retry)


def _name(entry: type[BaseException] | str) -> str:
    """Stored by class name: ``RetryPolicy.is_retryable`` matches names along the MRO."""
    return entry if isinstance(entry, str) else entry.__name__
