"""An action of the console, carried out as the HTTP API would and answered as an outcome.

The console never calls the engine's write methods itself: ``perform`` goes through
``aws.calls.call``, so its validation, refusals and answers are the API's and the CLI's.
A refused action is not an exception for the page: it is shown, with the API's code and
message, where the operator clicked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from weft_serverless.aws.calls import call
from weft_serverless.aws.responses import error_of
from weft_serverless.console.state import current_console

CALLER = "weft-console"
"""Who bulk audit records name as the caller of a console action."""
READ_ONLY_CODE = "ReadOnlyConsoleError"

log = logging.getLogger("weft_serverless.console")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an action did: the API's status and body, or its error's code and message."""

    ok: bool
    status: int
    body: Any = None
    code: str | None = None
    message: str = ""


def perform(
    operation: str,
    *,
    params: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
) -> Outcome:
    """Carry out ``operation`` (a route's operation name) through the console's engine."""
    if current_console().read_only:
        return Outcome(False, 403, None, READ_ONLY_CODE, "this console is read-only (--read-only)")
    return _carried_out(operation, params, query, body, CALLER)


def read(
    operation: str,
    *,
    params: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
) -> Outcome:
    """Carry out a reading ``operation`` (list, count, describe): allowed in read-only mode."""
    return _carried_out(operation, params, query, None, None)


def _carried_out(
    operation: str,
    params: Mapping[str, str] | None,
    query: Mapping[str, Any] | None,
    body: Mapping[str, Any] | None,
    caller: str | None,
) -> Outcome:
    try:
        status, reply = call(
            current_console().engine,
            operation,
            params=params,
            query=query,
            body=body,
            caller=caller,
        )
    except Exception as exc:
        return refusal(operation, exc)
    return Outcome(True, status, reply)


def refusal(operation: str, exc: Exception) -> Outcome:
    """The outcome of ``operation`` failing with ``exc``: the API's status, code and message."""
    error = error_of(exc)
    message = error.message
    if error.status >= 500:  # local: the operator may see what went wrong inside
        log.exception("%s failed", operation)
        message = f"{type(exc).__name__}: {exc}"
    return Outcome(False, error.status, error.body(), error.code, message)
