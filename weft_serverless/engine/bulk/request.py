"""What a bulk operation is asked to do, checked before anything is written: its kind, its
arguments, the listing filter it acts on, and the dry run's confirmation token.

The filter is whatever ``filters.make_filter`` accepts (the filters of ``list``): the names
are read from its signature, so a filter the listing learns is a filter bulk operations take,
unchanged. Values are checked by the listing itself (one page of one row is read).

The token is a confirmation, not an authorisation: it proves the caller saw the dry run of
exactly this operation (kind, arguments, filter) recently. It is a digest of those and its
expiry, so any process can check it without a stored record (ADR 0031).
"""

from __future__ import annotations

import datetime
import hashlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.engine.config import check_name
from weft_serverless.engine.handle import WorkflowSummary
from weft_serverless.engine.persistence.records import FAILED
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.visibility import listing
from weft_serverless.engine.visibility.filters import make_filter
from weft_serverless.errors import BulkConfirmationError, InvalidArgumentError
from weft_serverless.storage import keys

CANCEL = "cancel"
SIGNAL = "signal"
RETRY = "retry"
BULK_KINDS = (CANCEL, SIGNAL, RETRY)
TOKEN_TTL = 300.0  # seconds a dry run's token stays valid
_NOT_FILTERS = frozenset({"definitions"})


@dataclass(frozen=True, slots=True)
class BulkRequest:
    """A checked bulk operation: ``filters`` as the listing takes them (times as epoch
    seconds, tuples as lists, so the stored copy reads back equal); ``payload`` encoded."""

    kind: str
    filters: dict[str, Any]
    name: str | None = None
    payload: bytes | None = None
    fingerprint: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class BulkPreview:
    """A dry run: how many runs match now, and the token the real call must pass."""

    kind: str
    count: int
    token: str
    expires_at: float
    filters: dict[str, Any]


def filter_names() -> frozenset[str]:
    """The filters the listing takes (every parameter of ``make_filter`` but the registry)."""
    return frozenset(inspect.signature(make_filter).parameters) - _NOT_FILTERS


def page(
    rt: Runtime, filters: dict[str, Any], limit: int, cursor: str | None
) -> tuple[list[WorkflowSummary], str | None]:
    """One page of the listing under ``filters`` (a filter left out takes its default)."""
    return listing.list_page(rt, make_filter(rt.definitions, **filters), limit, cursor)


def build(
    rt: Runtime, kind: str, filters: dict[str, Any], name: Any = None, payload: Any = None
) -> BulkRequest:
    """Check and normalise a request; raises a ``WeftError`` before anything is written."""
    unknown = sorted(set(filters) - filter_names())
    if unknown:
        raise InvalidArgumentError(
            f"unknown filter {', '.join(unknown)}; bulk operations take the filters of list(): "
            + ", ".join(sorted(filter_names())),
            unknown[0],
        )
    checked = {key: _plain(value) for key, value in filters.items() if value is not None}
    if kind == RETRY:
        if checked.get("status", FAILED) != FAILED:
            raise InvalidArgumentError(
                "retry_failed_all acts on failed runs only; leave status out", "status"
            )
        checked["status"] = FAILED
    encoded = None
    if kind == SIGNAL:
        check_name(name, "name")
        encoded = rt.encode_payload(payload, f"payload of signal {name!r}")
    page(rt, checked, 1, None)  # the listing checks the values
    request = BulkRequest(kind, checked, name, encoded)
    return BulkRequest(kind, checked, name, encoded, _fingerprint(request))


def count(rt: Runtime, request: BulkRequest, page_size: int) -> int:
    """How many runs match the filter now (reads the whole listing, a page at a time)."""
    total, cursor = 0, None
    while True:
        rows, cursor = page(rt, request.filters, page_size, cursor)
        total += len(rows)
        if cursor is None:
            return total


def preview(rt: Runtime, request: BulkRequest, page_size: int) -> BulkPreview:
    expires = rt.now() + TOKEN_TTL
    token = f"{keys.ms(expires)}.{_digest(request, keys.ms(expires))}"
    return BulkPreview(request.kind, count(rt, request, page_size), token, expires, request.filters)


def check_token(rt: Runtime, request: BulkRequest, token: Any) -> None:
    """Refuse a missing, malformed, expired or foreign token (``BulkConfirmationError``)."""
    if token is None:
        raise BulkConfirmationError("missing", "no confirm token was given")
    expiry, _, digest = token.partition(".") if isinstance(token, str) else ("", "", "")
    if not expiry.isdigit() or len(digest) != 32:
        raise BulkConfirmationError("malformed", "the confirm token is not one a dry run returned")
    if digest != _digest(request, int(expiry)):
        raise BulkConfirmationError(
            "mismatch", "the token was issued for another operation, arguments or filter"
        )
    if keys.ms(rt.now()) > int(expiry):
        raise BulkConfirmationError("expired", f"tokens are valid for {TOKEN_TTL:.0f} s")


def _digest(request: BulkRequest, expiry_ms: int) -> str:
    text = f"{request.fingerprint}|{expiry_ms}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _fingerprint(request: BulkRequest) -> str:
    payload = None if request.payload is None else hashlib.sha256(request.payload).hexdigest()
    body = {"kind": request.kind, "filters": request.filters, "name": request.name}
    return json.dumps({**body, "payload": payload}, sort_keys=True, default=repr)


def _plain(value: Any) -> Any:
    """A filter value as it is stored and compared: datetimes as epoch seconds, tuples as
    lists (the HTTP API's JSON carries lists too), recursively."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError("filter datetimes must be timezone-aware")
        return value.timestamp()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def check_text(value: Any, field: str) -> None:
    """An audit field (``reason``, ``actor``, ``caller``): None or text up to 1,000 chars."""
    if value is not None and (not isinstance(value, str) or len(value) > 1000):
        raise InvalidArgumentError(f"{field} must be text of at most 1000 characters", field)
