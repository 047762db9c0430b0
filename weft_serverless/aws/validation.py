"""Request validation against the route table: one field at a time, naming the field.

A small JSON Schema subset (type, length, range, enum, anchored pattern, and UTF-8 length as
``x-utf8-max-bytes``) is all the table uses, so it is checked here by hand rather than with
pydantic, which the Lambda package does not ship. Unknown fields are refused, so a misspelt
option fails loudly instead of being ignored. Keywords under ``x-document`` narrow only the
OpenAPI document (``schemas.documented``); the engine checks those values itself.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

from weft_serverless.aws.responses import ApiError, bad_request
from weft_serverless.aws.route_types import MAX_BODY_BYTES, PATH_PARAMETERS, Field, Route
from weft_serverless.aws.schemas import Schema, check_text_bytes
from weft_serverless.errors import PayloadTooLargeError
from weft_serverless.identifiers import PRINTABLE_PATTERN, is_printable


def parse_body(
    raw: str | None, base64_encoded: bool, route: Route, limit: int = MAX_BODY_BYTES
) -> dict[str, Any]:
    """The JSON body as a dict of known, well-typed fields; 413 above ``limit`` bytes."""
    return check_body(read_body(raw, base64_encoded, limit), route)


def check_body(data: Mapping[str, Any], route: Route) -> dict[str, Any]:
    """A decoded body (from HTTP, a command line or a form) checked against the route."""
    return _check_fields(dict(data), route.body or (), "body")


def check_path_param(name: str, value: str) -> str:
    """A path parameter, already decoded, checked against its schema in ``PATH_PARAMETERS``
    (ids and names are printable and within their UTF-8 byte limits)."""
    field = PATH_PARAMETERS.get(name)
    if field is None:
        raise LookupError(f"no path parameter {name!r} in PATH_PARAMETERS")
    check_value(name, field.schema, value)
    return value


def read_body(raw: str | None, base64_encoded: bool, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """An HTTP body as a JSON object: 413 above ``limit`` bytes, 400 when not an object."""
    size = len(raw.encode()) if raw else 0
    if base64_encoded:
        size = size * 3 // 4
    if size > limit:
        raise ApiError(
            413,
            PayloadTooLargeError.__name__,
            f"the request body is about {size} bytes, over the limit of {limit} bytes",
            field="body",
        )
    text = raw or ""
    if base64_encoded:
        try:
            text = base64.b64decode(text, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise bad_request("body", "is not valid base64-encoded UTF-8") from None
    if not text.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:
            raise bad_request("body", f"is not valid JSON ({exc})") from None
        except RecursionError:
            # The JSON parser recurses once per nesting level; a body deeper than the
            # interpreter's stack is the caller's mistake (or an attack), not a server fault.
            raise bad_request(
                "body", "nests arrays or objects too deeply to parse; flatten the input"
            ) from None
    if not isinstance(data, dict):
        raise bad_request("body", f"must be a JSON object, not {_json_type(data)}")
    return data


def parse_query(params: Mapping[str, Any] | None, route: Route) -> dict[str, Any]:
    """Query parameters converted to their declared types; unknown ones are refused.

    Values arrive as text from a URL, or already typed from a command line.
    """
    data: dict[str, Any] = {}
    for name, text in (params or {}).items():
        field = next((f for f in route.query if f.name == name), None)
        kind = field.schema.get("type") if field is not None else None
        try:
            data[name] = (
                int(text) if kind == "integer" else float(text) if kind == "number" else text
            )
        except ValueError:
            raise bad_request(name, f"must be {_article(str(kind))}, got {text!r}") from None
    return _check_fields(data, route.query, "query")


def _check_fields(data: dict[str, Any], fields: tuple[Field, ...], where: str) -> dict[str, Any]:
    known = {field.name: field for field in fields}
    for name in data:
        if name not in known:
            expected = ", ".join(known) or "none"
            raise bad_request(name, f"is not a {where} field of this route (expected: {expected})")
    for field in fields:
        if field.name not in data:
            if field.required:
                raise bad_request(field.name, "is required")
            continue
        data[field.name] = _as_declared(field.schema, data[field.name])
        check_value(field.name, field.schema, data[field.name])
    return data


def _as_declared(schema: Schema, value: Any) -> Any:
    """A whole float where an integer is declared, as the int it is: JSON Schema counts
    ``1.0`` as an integer, and the engine takes ints (a page size, a limit)."""
    kinds = schema.get("type")
    wants_int = kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds)
    if wants_int and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def check_value(name: str, schema: Schema, value: Any) -> None:
    """Check ``value`` against the small JSON Schema subset the route table uses."""
    kinds = schema.get("type")
    if kinds is None:
        return
    allowed = [kinds] if isinstance(kinds, str) else list(kinds)
    if _json_type(value) not in allowed and not ("number" in allowed and _is_int(value)):
        wanted = " or ".join(_article(kind) for kind in allowed)
        raise bad_request(name, f"must be {wanted}, not {_json_type(value)}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise bad_request(name, "must not be empty")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise bad_request(name, f"must be at most {schema['maxLength']} characters")
        if "enum" in schema and value not in schema["enum"]:
            raise bad_request(name, f"must be one of {', '.join(schema['enum'])}")
        too_long = check_text_bytes(value, schema)
        if too_long is not None:
            raise bad_request(name, too_long)
        if schema.get("pattern") == PRINTABLE_PATTERN and not is_printable(value):
            raise bad_request(
                name, "must not contain control, format or separator characters but the space"
            )
        if "pattern" in schema and not re.fullmatch(schema["pattern"], value):
            raise bad_request(name, f"must match {schema['pattern']}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and not value >= schema["minimum"]:
            raise bad_request(name, f"must be at least {schema['minimum']}")
        if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
            raise bad_request(name, f"must be more than {schema['exclusiveMinimum']}")
        if "maximum" in schema and not value <= schema["maximum"]:
            raise bad_request(name, f"must be at most {schema['maximum']}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _article(kind: str) -> str:
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
