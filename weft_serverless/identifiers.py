"""Identifier limits, in UTF-8 bytes, checked once at the call that receives the identifier.

Ids and names become parts of storage keys, percent-encoded (``storage/keys.py``): each
UTF-8 byte outside ``A-Z a-z 0-9 - _ . ~ @ :`` becomes three ASCII bytes. Every limit below
is sized so that three times it, plus the fixed part of its longest key, fits the smallest key
part of any backend (1,024 bytes: DynamoDB's sort key), so an identifier accepted here can
never fail later in storage (ADR 0012; ``tests/unit/test_identifier_budget.py``).
"""

from __future__ import annotations

import re
from typing import Any

from weft_serverless.errors import InvalidArgumentError

MAX_WORKFLOW_ID_BYTES = 256
"""Workflow ids, child ids and idempotency keys (in timer, status and claim sort keys)."""
MAX_NAME_BYTES = 256
"""Signal names, update names and ``get_version`` change ids."""
MAX_DEDUP_ID_BYTES = 128
"""``signal_id`` and ``update_id``."""

NON_PRINTABLE = (
    r"\x00-\x1f\x7f-\xa0\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u1680"
    r"\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u3000\ue000-\uf8ff"
    r"\ufdd0-\ufdef\ufeff\ufff9-\ufffb\ufffe\uffff"
)
"""The characters an id may not hold, as the body of a regular expression class: the
controls, format characters, separators but the space, private-use characters and
noncharacters of the Basic Multilingual Plane (what ``str.isprintable`` refuses there,
unassigned code points aside). Unlike ``isprintable``, the rule does not move with Python's
Unicode tables, so every engine of a fleet agrees on which ids exist; and it is the same
text in the HTTP API's OpenAPI document (``\\xHH`` and ``\\uHHHH`` read alike in Python, ECMA
and Rust regular expressions)."""
PRINTABLE_PATTERN = f"^[^{NON_PRINTABLE}]+$"
_PRINTABLE = re.compile(PRINTABLE_PATTERN)


def is_printable(text: str) -> bool:
    """Whether ``text`` is non-empty and holds no character of ``NON_PRINTABLE``."""
    return _PRINTABLE.fullmatch(text) is not None


def check_text(value: Any, what: str, field: str | None) -> str:
    """Return ``value`` if it is a non-empty string, else raise: the one such check, used by
    every identifier check below and by the names that have no byte limit (query names).

    ``what`` names the value in the message; ``field`` is the argument blamed on the error
    (``None`` when the value is not one argument of a public call, e.g. a handler name).
    """
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty string", field)
    return value


def check_identifier(value: Any, field: str, max_bytes: int) -> str:
    """Return ``value`` if it is a non-empty string of at most ``max_bytes`` UTF-8 bytes.

    Raises ``InvalidArgumentError`` naming ``field`` otherwise, before anything is written.
    """
    text = check_text(value, field, field)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{field} holds a lone surrogate, which UTF-8 cannot encode; pass valid text", field
        ) from None
    if size > max_bytes:
        raise InvalidArgumentError(
            f"{field} is {size} bytes in UTF-8, over the limit of {max_bytes} bytes "
            "(letters outside ASCII take 2 to 4 bytes each); use a shorter one",
            field,
        )
    return text


def check_workflow_id(value: Any, field: str = "workflow id") -> str:
    """A workflow (or child) id: an identifier whose characters are all printable
    (``is_printable``), so it shows as it is in logs, the console and a terminal."""
    check_identifier(value, field, MAX_WORKFLOW_ID_BYTES)
    if not is_printable(value):
        raise InvalidArgumentError(
            f"{field} must not contain control, format or separator characters (a space is "
            f"fine), got {value!r}",
            field,
        )
    return str(value)


def check_name(value: Any, field: str) -> str:
    """A signal, update, query-handler or memo name, a workflow type or a change id."""
    return check_identifier(value, field, MAX_NAME_BYTES)


def check_dedup_id(value: Any, field: str) -> str:
    """A caller's ``signal_id`` or ``update_id``."""
    return check_identifier(value, field, MAX_DEDUP_ID_BYTES)


def check_idempotency_key(value: Any) -> str:
    """A start's idempotency key: it shares the workflow id's keys, so its limit too."""
    return check_identifier(value, "idempotency_key", MAX_WORKFLOW_ID_BYTES)
