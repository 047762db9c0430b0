"""Search attributes and tags: their declared types, their checks, and their key encoding.

A workflow type declares ``{name: type}``; a run's values are checked against it before any
write (start or ``ctx.upsert_search_attributes``). Each value also has an index token: text
whose equality is the value's equality (``100`` and ``100.0`` share one, as numbers), and whose
order is the value's order within one type, so the index items of ADR 0030 can be read by value.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from weft_serverless.errors import (
    InvalidFilterError,
    InvalidTagError,
    SearchAttributeError,
)

ATTRIBUTE_TYPES: dict[type, str] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    datetime.datetime: "datetime",
}
"""The types a search attribute may be declared with, and their names in messages."""

MAX_ATTRIBUTES = 10
"""Declared search attributes per workflow type: each is one index item a start writes."""
MAX_TAGS = 10
"""Tags per run: each is one index item, rewritten when the run's status changes."""
MAX_TAG_LENGTH = 64
TAG_PATTERN = f"^[A-Za-z0-9_.:/@-]{{1,{MAX_TAG_LENGTH}}}$"
"""One tag, as a JSON Schema pattern too (the HTTP API documents it)."""
MAX_STRING_VALUE_BYTES = 256
"""A string value's UTF-8 length: it is part of a storage key."""
MAX_SAFE_INT = 2**53
"""Whole numbers beyond this lose precision as index numbers, so they are refused."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_TAG = re.compile(TAG_PATTERN)  # used with fullmatch: a search's "$" allows a final "\n"

Declared = Mapping[str, type]


def declaration_issues(spec: object) -> list[str]:
    """What is wrong with a ``search_attributes`` declaration (empty: nothing)."""
    if not isinstance(spec, Mapping):
        return ["search_attributes must be a dict of {name: type}"]
    issues: list[str] = []
    if len(spec) > MAX_ATTRIBUTES:
        issues.append(f"search_attributes declares {len(spec)}; at most {MAX_ATTRIBUTES}")
    names = ", ".join(ATTRIBUTE_TYPES.values())
    for name, kind in spec.items():
        if not isinstance(name, str) or not _NAME.match(name):
            issues.append(
                f"search attribute name {name!r} must be a letter then letters, digits or _ "
                "(at most 64)"
            )
        if kind not in ATTRIBUTE_TYPES:
            issues.append(f"search attribute {name!r} has type {kind!r}; use one of {names}")
    return issues


def check_values(declared: Declared, values: object, workflow_type: str) -> dict[str, Any]:
    """The values, checked against the declaration and normalised (ints of a float
    attribute become floats); raises ``SearchAttributeError`` naming the first problem."""
    if not isinstance(values, Mapping):
        raise SearchAttributeError(
            "search_attributes must be a dict of {name: value}", "search_attributes"
        )
    checked: dict[str, Any] = {}
    for name, value in values.items():
        kind = declared.get(name) if isinstance(name, str) else None
        if kind is None:
            known = ", ".join(sorted(declared)) or "none"
            raise SearchAttributeError(
                f"search attribute {name!r} is not declared by workflow type {workflow_type!r} "
                f"(declared: {known}); declare it in workflow(..., search_attributes={{...}})",
                "search_attributes",
            )
        checked[name] = coerce(name, kind, value)
    return checked


def coerce(name: str, kind: type, value: object) -> Any:
    """``value`` as an attribute of type ``kind``, or ``SearchAttributeError``."""
    ok = _fits(kind, value)
    if not ok:
        raise SearchAttributeError(
            f"search attribute {name!r} is declared {ATTRIBUTE_TYPES[kind]}; got "
            f"{type(value).__name__} {value!r}",
            "search_attributes",
        )
    if kind is float:
        return float(value)  # type: ignore[arg-type]
    return value


def _fits(kind: type, value: object) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind is int and not isinstance(value, int):
            return False
        return math.isfinite(value) and abs(value) <= MAX_SAFE_INT
    if kind is str:
        return isinstance(value, str) and _string_ok(value)
    if kind is datetime.datetime:
        return isinstance(value, datetime.datetime) and value.tzinfo is not None
    return False


def _string_ok(value: str) -> bool:
    try:
        return len(value.encode("utf-8")) <= MAX_STRING_VALUE_BYTES
    except UnicodeEncodeError:
        return False


def check_tags(tags: object) -> list[str]:
    """Tags, checked and de-duplicated in their given order; ``InvalidTagError`` otherwise.

    The one check of every entry point (start, child start, list and count filters, bulk
    filters). Each tag is checked before any is hashed, so ``[[1]]`` or ``[{}]`` is a bad
    tag, not a ``TypeError``.
    """
    if tags is None:
        return []
    if isinstance(tags, str | bytes | Mapping) or not isinstance(tags, Iterable):
        raise InvalidTagError(f"tags must be a list of strings, got {tags!r}", "tags")
    given = list(tags)
    for tag in given:
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise InvalidTagError(
                f"tag {tag!r} must be 1 to {MAX_TAG_LENGTH} characters of letters, digits and "
                "_ . : / @ -",
                "tags",
            )
    unique = list(dict.fromkeys(given))
    if len(unique) > MAX_TAGS:
        raise InvalidTagError(f"a run has at most {MAX_TAGS} tags; got {len(unique)}", "tags")
    return unique


def value_token(value: Any) -> str:
    """The index text of a value: equal values, equal text; order kept within one type."""
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int | float):
        return "n" + _number(float(value))
    if isinstance(value, datetime.datetime):
        return "d" + _number(value.timestamp())
    if isinstance(value, str):
        return "s" + quote(value, safe="-_.~@:")
    raise SearchAttributeError(f"{type(value).__name__} {value!r} is not a search value")


def _number(value: float) -> str:
    """Sixteen hex digits whose text order is the order of the floats (IEEE 754 trick)."""
    bits = struct.unpack(">Q", struct.pack(">d", value + 0.0))[0]
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 0x8000000000000000
    return f"{bits:016x}"


_CONDITION = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*(==|!=|<=|>=|\^=|=|<|>)(.*)$")
_TEXT_OPERATORS = {"=": "==", "==": "==", "^=": "prefix"}


def parse_condition(text: str) -> tuple[str, tuple[str, Any]]:
    """``NAME OP VALUE`` from a command line (``amount>=100``, ``region^=eu``) as a ``where``
    entry. The value is read as JSON when it is a JSON scalar (``100``, ``true``, ``"7"``),
    else taken as text; ``^=`` means "starts with"."""
    found = _CONDITION.match(text.strip())
    if found is None:
        raise InvalidFilterError(
            f"{text!r} is not NAME OP VALUE with OP one of = != < <= > >= ^=", "where"
        )
    name, op, raw = found.groups()
    value: Any = raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, str | int | float | bool) and raw.strip():
        value = parsed
    return name, (_TEXT_OPERATORS.get(op, op), value)
