"""The JSON Schemas of the API's values, as the server checks them and as the document says.

A field's schema is what ``validation`` checks before the engine is called (with the
engine's own rules behind it). Where JSON Schema cannot say the server's rule, ``documented``
gives the OpenAPI document a narrower schema, never a looser one (ADR 0041):

* ``x-utf8-max-bytes``: JSON Schema counts characters, the limits are UTF-8 bytes. The
  document keeps the keyword and adds a pattern that allows the full length in ASCII and a
  quarter of it otherwise (a character takes at most 4 bytes).
* ``x-document``: keywords only the document carries, such as a pattern for durations
  written as text (``"5m"``) or a ``date-time`` format and pattern for ISO 8601 instants;
  the server reads those values more leniently.
"""

from __future__ import annotations

import math
from typing import Any

from weft_serverless.identifiers import (
    MAX_DEDUP_ID_BYTES,
    MAX_NAME_BYTES,
    MAX_WORKFLOW_ID_BYTES,
    NON_PRINTABLE,
    PRINTABLE_PATTERN,
)
from weft_serverless.search_attributes import MAX_TAG_LENGTH, MAX_TAGS, TAG_PATTERN
from weft_serverless.time_values import MAX_DURATION, MAX_INSTANT, UNIT_SECONDS

Schema = dict[str, Any]

MAX_BYTES = "x-utf8-max-bytes"
DOCUMENT_ONLY = "x-document"
RUN_ID_SUFFIX_BYTES = 17
"""A schedule's runs are named ``{schedule_id}-YYYYMMDDTHHMMSSZ``: 17 bytes after the id."""

ANY: Schema = {"description": "Any JSON value."}


def text(max_bytes: int, *, printable: bool = False) -> Schema:
    """A non-empty string of at most ``max_bytes`` UTF-8 bytes (printable, if asked)."""
    schema: Schema = {"type": "string", "minLength": 1, MAX_BYTES: max_bytes}
    if printable:
        schema["pattern"] = PRINTABLE_PATTERN
    return schema


ID = text(MAX_WORKFLOW_ID_BYTES, printable=True)
SCHEDULE_ID = text(MAX_WORKFLOW_ID_BYTES - RUN_ID_SUFFIX_BYTES, printable=True)
NAME = text(MAX_NAME_BYTES)
PRINTABLE_NAME = text(MAX_NAME_BYTES, printable=True)
DEDUP_ID = text(MAX_DEDUP_ID_BYTES)
OPERATION_ID: Schema = {"type": "string", "pattern": r"^[0-9]{13,}-[0-9a-f]{8}$"}
"""A bulk operation's id: its creation time in milliseconds and eight hex digits."""
TAGS: Schema = {
    "type": "array",
    DOCUMENT_ONLY: {
        "items": {"type": "string", "pattern": TAG_PATTERN},
        "maxItems": MAX_TAGS,
    },
}
TAG_LIST: Schema = {
    "type": "string",
    "minLength": 1,
    DOCUMENT_ONLY: {
        "pattern": f"^{TAG_PATTERN[1:-1]}(,{TAG_PATTERN[1:-1]}){{0,{MAX_TAGS - 1}}}$",
    },
}
"""Tags as a query parameter: comma-separated, each as ``TAGS`` items."""


def _duration_text(least_seconds: float) -> str:
    """A pattern of duration strings (``"90s"``, ``"1.5h"``) from ``least_seconds`` (0, or
    at least a millisecond) up to ``MAX_DURATION``: the digits before the point are bounded so
    that no match can exceed it, and a positive least value asks for a non-zero leading digit
    and enough digits to reach it."""
    alternatives = []
    for unit, seconds in UNIT_SECONDS.items():
        digits = len(str(int(MAX_DURATION / seconds))) - 1  # 10**digits units fit
        if least_seconds <= 0:
            whole = f"(0|[1-9][0-9]{{0,{digits - 1}}})"
        else:
            least_units = math.ceil(round(least_seconds / seconds, 6))
            whole = f"[1-9][0-9]{{{len(str(least_units)) - 1},{digits - 1}}}"
        alternatives.append(f"{whole}(\\.[0-9]+)?{unit}")
    return f"^({'|'.join(alternatives)})$"


def duration(least: float = 0, *, exclusive: bool = False) -> Schema:
    """Seconds (a number) or a duration string, from ``least`` (or above it) to 100 years."""
    bound = "exclusiveMinimum" if exclusive else "minimum"
    text_least = max(least, 0.001) if exclusive else least
    return {
        "type": ["number", "string"],
        bound: least,
        "maximum": MAX_DURATION,
        DOCUMENT_ONLY: {"pattern": _duration_text(text_least)},
        "description": "Seconds, or a number and a unit (ms, s, m, h, d) such as '90s' or "
        "'1.5h'; at most 100 years.",
    }


ISO_INSTANT = (
    r"^(197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
    r"-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
"""RFC 3339 times the server reads as the same instant: an upper-case ``T`` and ``Z``, at most
microseconds, years 1971 to 9998 (a time in 1970 with a positive offset is before the epoch,
one in 9999 with a negative offset after the latest instant); the server also reads other
ISO 8601 forms."""
INSTANT: Schema = {
    "type": ["number", "string"],
    "minimum": 0,
    "maximum": MAX_INSTANT,
    DOCUMENT_ONLY: {"format": "date-time", "pattern": ISO_INSTANT},
    "description": "Epoch seconds, or an RFC 3339 time with a zone (Z or an offset), from "
    "1970-01-01 to 9999-12-31 UTC.",
}
EPOCH: Schema = {"type": "number", "minimum": 0, "maximum": MAX_INSTANT}
"""An instant given as epoch seconds only (list filters)."""


def documented(schema: Schema, description: str | None = None) -> Schema:
    """``schema`` as the OpenAPI document states it, never looser than the server; a field's
    ``description`` goes first."""
    out = {key: value for key, value in schema.items() if key != DOCUMENT_ONLY}
    if description is not None:
        out["description"] = " ".join(filter(None, (description, out.get("description"))))
    out.update(schema.get(DOCUMENT_ONLY, {}))
    if MAX_BYTES in out:
        limit = out[MAX_BYTES]
        printable = out.get("pattern") == PRINTABLE_PATTERN
        ascii_class = r"[\x20-\x7e]" if printable else r"[\x00-\x7f]"
        any_class = f"[^{NON_PRINTABLE}]" if printable else r"[\s\S]"
        out["maxLength"] = limit
        out["pattern"] = f"^({ascii_class}{{1,{limit}}}|{any_class}{{1,{limit // 4}}})$"
        note = (
            f"At most {limit} bytes in UTF-8: JSON Schema counts characters, so the pattern "
            f"allows {limit} ASCII characters, or {limit // 4} of any kind."
        )
        if printable:
            note += " No control, format or separator characters but the space."
        out["description"] = f"{out['description']} {note}" if "description" in out else note
    return out


def check_text_bytes(value: str, schema: Schema) -> str | None:
    """What is wrong with ``value``'s UTF-8 length under ``schema``, or None."""
    limit = schema.get(MAX_BYTES)
    if limit is None:
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "holds a lone surrogate, which UTF-8 cannot encode"
    return None if size <= limit else f"is {size} bytes in UTF-8, over the limit of {limit}"


__all__ = [
    "ANY",
    "DEDUP_ID",
    "EPOCH",
    "ID",
    "INSTANT",
    "MAX_TAG_LENGTH",
    "NAME",
    "OPERATION_ID",
    "PRINTABLE_NAME",
    "SCHEDULE_ID",
    "TAGS",
    "TAG_LIST",
    "Schema",
    "check_text_bytes",
    "documented",
    "duration",
    "text",
]
