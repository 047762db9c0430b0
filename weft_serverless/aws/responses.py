"""HTTP statuses for the engine's errors, the JSON error body, and JSON encoding of values.

Every error body is ``{"code", "message"}`` plus, when they apply, ``field`` (the input that
was wrong), ``issues`` (an update validator's list), ``retryable`` (a retry can succeed) and
the error's own fields (a concurrency limit's ``workflow_type``, ``key`` and ``limit``).
``code`` is the error's stable class name, so clients switch on it, never on the message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from weft_serverless import (
    BulkConfirmationError,
    BulkOperationNotFoundError,
    ScheduleAlreadyExistsError,
    ScheduleNotFoundError,
    TeardownPendingError,
    WorkflowConcurrencyLimitExceededError,
    jsonable,
)
from weft_serverless.errors import (
    ActivityTokenNotFoundError,
    CodecError,
    EngineLeaseUnavailableError,
    InvalidArgumentError,
    PayloadTooLargeError,
    StorageLimitError,
    StorageUnavailableError,
    UnknownQueryError,
    UnknownUpdateError,
    UnknownWorkflowTypeError,
    UnsupportedSchemaVersionError,
    UpdateFailedError,
    UpdateValidationError,
    WeftError,
    WorkflowAlreadyExistsError,
    WorkflowBusyError,
    WorkflowClaimUnavailableError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)

INTERNAL_ERROR = "InternalError"

# (error class, HTTP status, retryable), most specific first; the first match wins.
ERROR_STATUSES: tuple[tuple[type[WeftError], int, bool], ...] = (
    (PayloadTooLargeError, 413, False),
    (StorageLimitError, 413, False),
    (UpdateValidationError, 400, False),
    (InvalidArgumentError, 400, False),
    (CodecError, 400, False),
    (UnknownQueryError, 400, False),
    (UnknownUpdateError, 400, False),
    (UnknownWorkflowTypeError, 400, False),
    (WorkflowNotFoundError, 404, False),
    (ScheduleNotFoundError, 404, False),
    (ActivityTokenNotFoundError, 404, False),
    (BulkOperationNotFoundError, 404, False),
    (BulkConfirmationError, 409, False),
    (WorkflowAlreadyExistsError, 409, False),
    (ScheduleAlreadyExistsError, 409, False),
    (WorkflowNotRunningError, 409, False),
    (WorkflowClaimUnavailableError, 409, True),
    (WorkflowBusyError, 409, True),
    (EngineLeaseUnavailableError, 409, True),
    (TeardownPendingError, 409, True),
    (UpdateFailedError, 422, False),
    (WorkflowConcurrencyLimitExceededError, 429, True),
    (StorageUnavailableError, 503, True),
    # A record written by a newer release: this container cannot serve the request, another
    # one (during a deploy) or a later one (after a rollback is rolled forward) can.
    (UnsupportedSchemaVersionError, 503, True),
)


@dataclass
class ApiError(Exception):
    """An error answer: raised by request parsing, or made from an engine error."""

    status: int
    code: str
    message: str
    field: str | None = None
    retryable: bool = False
    issues: list[dict[str, Any]] | None = None
    details: dict[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.issues is not None:
            out["issues"] = self.issues
        if self.retryable:
            out["retryable"] = True
        return {**out, **(self.details or {})}


def bad_request(field: str, message: str) -> ApiError:
    """A 400 naming the input at fault."""
    return ApiError(400, InvalidArgumentError.__name__, f"{field}: {message}", field=field)


def error_of(exc: Exception, payload_field: str | None = None) -> ApiError:
    """The answer for ``exc``; anything unexpected is a 500 that reveals nothing inside."""
    if isinstance(exc, ApiError):
        return exc
    for cls, status, retryable in ERROR_STATUSES:
        if isinstance(exc, cls):
            error = ApiError(status, exc.code, str(exc), retryable=retryable)
            if status == 413:
                error.field = payload_field
            if isinstance(exc, CodecError) and exc.path:
                error.field = exc.path
            if isinstance(exc, InvalidArgumentError) and exc.field:
                error.field = exc.field
            if isinstance(exc, UpdateValidationError):
                error.issues = [dict(issue) for issue in exc.issues]
            if isinstance(exc, WorkflowConcurrencyLimitExceededError):
                error.details = {
                    "workflow_type": exc.workflow_type,
                    "key": exc.key,
                    "limit": exc.limit,
                }
            return error
    return ApiError(
        500,
        INTERNAL_ERROR,
        "the request failed inside the service; retry later, and quote the correlation id "
        "(X-Correlation-Id) if it persists",
    )


def to_json(value: Any) -> str:
    """Compact JSON for a response body, after ``jsonable``."""
    return json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
