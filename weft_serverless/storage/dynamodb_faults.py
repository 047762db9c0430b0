"""Failure classification and the retry loop of the DynamoDB adapter.

Every botocore exception is sorted into one of three fates: retry (throttling, conflicts,
5xx, lost connections), a failed condition (handed back to the adapter), or a typed
``StorageError``. Retries use jittered exponential backoff bounded by a time budget, and
remember whether any attempt may have been applied, so that a later condition failure is
settled by reading back instead of being guessed (ADR 0003).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from weft_serverless.errors import (
    StorageError,
    StorageRequestError,
    StorageRetriesExhaustedError,
)
from weft_serverless.storage.dynamodb_meter import RequestMeter

T = TypeVar("T")
TimeBudget = float | Callable[[], float] | None

DEFAULT_TIME_BUDGET = 20.0
BASE_DELAY = 0.05
MAX_DELAY = 2.0

# The service refused before doing anything: retrying is safe and nothing was applied.
_RETRY_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "Throttling",
        "ThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# The request may have been applied (or is still running): retry with the same token.
_AMBIGUOUS_CODES = frozenset(
    {
        "TransactionInProgressException",
        "InternalServerError",
        "InternalFailure",
        "InternalError",
        "ServiceUnavailable",
    }
)
_RETRY_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "None"}
)
_REASONS_IN_MESSAGE = re.compile(r"\[([A-Za-z, ]*)\]\s*$")


class ConditionFailed(Exception):
    """A conditional write's condition did not hold; carries what DynamoDB sent back.

    ``maybe_applied`` is true when an earlier attempt of the same commit may have landed,
    in which case the failure may be the replay meeting its own write.
    """

    def __init__(self, response: Mapping[str, Any], maybe_applied: bool) -> None:
        super().__init__("condition failed")
        self.response = response
        self.maybe_applied = maybe_applied

    @property
    def item(self) -> dict[str, Any] | None:
        """The current item (``ALL_OLD``) of a failed single-item write, if it exists."""
        item = self.response.get("Item")
        return dict(item) if item else None


@dataclass(frozen=True, slots=True)
class Fault:
    """What one failed attempt means for the next step."""

    fate: Literal["retry", "condition", "fatal"]
    maybe_applied: bool = False
    description: str = ""
    error: StorageError | None = None
    response: Mapping[str, Any] = field(default_factory=dict)


def cancellation_reasons(response: Mapping[str, Any]) -> list[str]:
    """Reason codes of a ``TransactionCanceledException``, one per transaction item."""
    reasons = response.get("CancellationReasons")
    if reasons:
        return [str(reason.get("Code", "None")) for reason in reasons]
    # Older SDKs and emulators put the reasons only in the message: "... [A, None]".
    match = _REASONS_IN_MESSAGE.search(str(response.get("Error", {}).get("Message", "")))
    return [part.strip() for part in match.group(1).split(",")] if match else []


def classify(exc: BaseException, operation: str) -> Fault | None:
    """Sort a botocore exception into retry, condition or fatal; ``None`` if not botocore's."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
    )

    if isinstance(exc, ClientError):
        return _classify_client_error(exc.response, operation)
    if isinstance(exc, ConnectTimeoutError | EndpointConnectionError):
        return Fault("retry", False, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, BotoCoreError):
        from botocore.exceptions import ConnectionError as BotoConnectionError
        from botocore.exceptions import HTTPClientError

        if isinstance(exc, HTTPClientError | BotoConnectionError):
            # Sent, then the answer was lost (read timeout, reset): it may have been applied.
            return Fault("retry", True, f"{type(exc).__name__}: {exc}")
        error = StorageRequestError(operation, type(exc).__name__, str(exc))
        return Fault("fatal", False, str(exc), error)
    return None


def _classify_client_error(response: Mapping[str, Any], operation: str) -> Fault:
    error = response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    described = f"{code}: {message}" if message else code
    if code == "ConditionalCheckFailedException":
        return Fault("condition", False, described, response=response)
    if code == "TransactionCanceledException":
        reasons = cancellation_reasons(response)
        described = f"{code} {reasons}"
        if "ConditionalCheckFailed" in reasons:
            return Fault("condition", False, described, response=response)
        if reasons and all(reason in _RETRY_REASONS for reason in reasons):
            return Fault("retry", False, described)
        error = StorageRequestError(operation, code, f"{message} (reasons: {reasons})")
        return Fault("fatal", False, described, error)
    if code in _RETRY_CODES:
        return Fault("retry", False, described)
    if code in _AMBIGUOUS_CODES or status >= 500:
        return Fault("retry", True, described or f"HTTP {status}")
    return Fault("fatal", False, described, StorageRequestError(operation, code, message))


class Retrier:
    """Runs one request with retries inside a time budget; the adapter owns all retries.

    ``time_budget`` is seconds per operation, or a callable returning the seconds left
    right now (e.g. from a Lambda context), or ``None`` for ``DEFAULT_TIME_BUDGET``.
    ``sleep``, ``clock`` and ``rng`` are injectable so tests never wait for real.
    ``observe`` sees every answer (a result or an error's response) with the ``wall``-clock
    times it was sent and received, which is how the store's clock is read for free.
    """

    def __init__(
        self,
        meter: RequestMeter,
        *,
        time_budget: TimeBudget = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        base_delay: float = BASE_DELAY,
        max_delay: float = MAX_DELAY,
        observe: Callable[[Any, float, float], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.meter = meter
        self.observe = observe
        self.wall = wall
        self.time_budget = time_budget
        self.sleep = sleep
        self.clock = clock
        self.rng = rng or random.Random()
        self.base_delay = base_delay
        self.max_delay = max_delay

    def attempts(self, operation: str) -> Attempts:
        return Attempts(self, operation)

    def call(self, operation: str, send: Callable[[], T]) -> T:
        """Return ``send()``'s result, retrying transient failures.

        Raises:
            ConditionFailed: the condition did not hold (the adapter decides what it means).
            StorageRetriesExhaustedError: the budget ran out.
            StorageRequestError: the request is invalid or not allowed.
        """
        attempts = self.attempts(operation)
        while True:
            attempts.begin()
            sent = self.wall()
            try:
                result = send()
            except Exception as exc:
                self._observe(getattr(exc, "response", None), sent)
                fault = classify(exc, operation)
                if fault is None:
                    raise
                if fault.fate == "condition":
                    raise ConditionFailed(fault.response, attempts.maybe_applied) from None
                if fault.error is not None:
                    raise fault.error from None
                attempts.failed(fault)
                continue
            self._observe(result, sent)
            return result

    def _observe(self, response: Any, sent: float) -> None:
        """Hand an answer's headers to the store-clock estimate (free: no extra request)."""
        if self.observe is not None and response is not None:
            self.observe(response, sent, self.wall())


class Attempts:
    """Retry state of one logical operation: attempt count, deadline and ambiguity."""

    def __init__(self, retrier: Retrier, operation: str) -> None:
        self._retrier = retrier
        self.operation = operation
        self.count = 0
        self.maybe_applied = False
        self.last = ""
        self._started = retrier.clock()

    def remaining(self) -> float:
        budget = self._retrier.time_budget
        if callable(budget):
            return budget()
        seconds = DEFAULT_TIME_BUDGET if budget is None else budget
        return self._started + seconds - self._retrier.clock()

    def begin(self) -> None:
        """Count an attempt about to be sent; refuse to start one past the budget."""
        if self.remaining() <= 0:
            self._give_up()
        self.count += 1

    def failed(self, fault: Fault) -> None:
        """Record a retryable failure and back off, or give up if the wait would not fit."""
        self.maybe_applied = self.maybe_applied or fault.maybe_applied
        self.last = fault.description
        self._retrier.meter.record_retry(self.operation)
        self.backoff()

    def backoff(self) -> None:
        """Sleep a jittered, exponentially growing delay (half fixed, half random)."""
        r = self._retrier
        cap = min(r.max_delay, r.base_delay * 2 ** max(0, self.count - 1))
        delay = cap / 2 + r.rng.uniform(0, cap / 2)
        if self.remaining() < delay:
            self._give_up()
        r.sleep(delay)

    def _give_up(self) -> None:
        raise StorageRetriesExhaustedError(
            self.operation, self.count, self.maybe_applied, self.last or "time budget spent"
        )
