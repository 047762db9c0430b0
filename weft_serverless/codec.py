"""The msgpack codec for everything that crosses a yield or lands in storage.

Plain msgpack loses Python types users expect to survive a crash (tuples, datetimes,
Decimals, sets, UUIDs), so each gets an extension code. The codes are part of the persisted
format: never renumber one, only add.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import math
import uuid
from collections.abc import Mapping
from typing import Any

import msgpack

from weft_serverless.errors import CodecError, UnsupportedSchemaVersionError

SCHEMA_VERSION = 1
"""The format of the records this release writes (the ``sv`` field of a record)."""
SUPPORTED_SCHEMA_VERSIONS = (1,)
"""The record formats this release reads; a record stamped with any other is refused."""

_EXT_DATETIME = 1
_EXT_DATE = 2
_EXT_DECIMAL = 3
_EXT_SET = 4
_EXT_FROZENSET = 5
_EXT_TUPLE = 6
_EXT_UUID = 7
_EXT_TIMEDELTA = 8


def _default(obj: Any) -> msgpack.ExtType:
    if isinstance(obj, _dt.datetime):
        return msgpack.ExtType(_EXT_DATETIME, obj.isoformat().encode())
    if isinstance(obj, _dt.date):
        return msgpack.ExtType(_EXT_DATE, obj.isoformat().encode())
    if isinstance(obj, _dt.timedelta):
        return msgpack.ExtType(_EXT_TIMEDELTA, _pack([obj.days, obj.seconds, obj.microseconds]))
    if isinstance(obj, decimal.Decimal):
        return msgpack.ExtType(_EXT_DECIMAL, str(obj).encode())
    if isinstance(obj, frozenset):
        return msgpack.ExtType(_EXT_FROZENSET, _pack(_sorted_if_possible(obj)))
    if isinstance(obj, set):
        return msgpack.ExtType(_EXT_SET, _pack(_sorted_if_possible(obj)))
    if isinstance(obj, tuple):
        return msgpack.ExtType(_EXT_TUPLE, _pack(list(obj)))
    if isinstance(obj, uuid.UUID):
        return msgpack.ExtType(_EXT_UUID, obj.bytes)
    # strict_types sends subclasses here (IntEnum, StrEnum, OrderedDict, ...): store their
    # plain base value, as json would.
    if isinstance(obj, str):
        return str.__str__(obj)  # the value, not an Enum's "Cls.NAME" rendering
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, bytes):
        return bytes(obj)
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _sorted_if_possible(items: set[Any] | frozenset[Any]) -> list[Any]:
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_DATETIME:
        return _dt.datetime.fromisoformat(data.decode())
    if code == _EXT_DATE:
        return _dt.date.fromisoformat(data.decode())
    if code == _EXT_TIMEDELTA:
        days, seconds, micros = _unpack(data)
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    if code == _EXT_DECIMAL:
        return decimal.Decimal(data.decode())
    if code == _EXT_SET:
        return set(_unpack(data))
    if code == _EXT_FROZENSET:
        return frozenset(_unpack(data))
    if code == _EXT_TUPLE:
        return tuple(_unpack(data))
    if code == _EXT_UUID:
        return uuid.UUID(bytes=data)
    return msgpack.ExtType(code, data)


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, default=_default, use_bin_type=True, strict_types=True)
    return packed


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def encode(value: Any, what: str = "value") -> bytes:
    """Encode ``value``; on failure raise ``CodecError`` naming the path inside it."""
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        path, bad = _find_unencodable(value, what)
        if not path:  # no single part to blame: the value as a whole
            path, bad = what, value
        raise CodecError(
            f"cannot encode {path}: {type(bad).__name__} is not supported "
            f"({exc}); use plain data (dict, list, str, int, float, bool, None, bytes, "
            "datetime, Decimal, set, tuple, UUID)",
            path=path,
        ) from None


def decode(data: bytes) -> Any:
    """Decode bytes written by ``encode``."""
    try:
        return _unpack(data)
    except Exception as exc:
        raise CodecError(f"stored value cannot be decoded: {exc}") from None


def decode_record(data: bytes, what: str) -> Any:
    """Decode an engine record, refusing one stamped with a schema version this release lacks.

    A record without ``sv`` is version 1: this release stamps only the workflow state, and a
    later one that changes any other record's format stamps that record, so every release
    from this one on refuses what it cannot read instead of misreading it (ADR 0014).
    """
    record = decode(data)
    if isinstance(record, dict):
        check_schema_version(record, what)
    return record


def check_schema_version(record: Mapping[str, Any], what: str) -> None:
    """Raise ``UnsupportedSchemaVersionError`` unless ``record`` is in a format read here."""
    version = record.get("sv", 1)
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        raise UnsupportedSchemaVersionError(what, version, SUPPORTED_SCHEMA_VERSIONS)


def _find_unencodable(value: Any, path: str) -> tuple[str, Any]:
    """Walk a value to the first part the codec refuses; returns its path and the part.

    Each leaf is tried with the codec itself, so the walk can never disagree with it.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if not _packs(key):
                return f"{path} key {key!r}", key
            found = _find_unencodable(item, f"{path}[{key!r}]")
            if found[0]:
                return found
        return "", None
    if isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            found = _find_unencodable(item, f"{path}[{index}]")
            if found[0]:
                return found
        return "", None
    return ("", None) if _packs(value) else (path, value)


def _packs(value: Any) -> bool:
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def jsonable(value: Any) -> Any:
    """Turn a decoded value into plain JSON types (the API and the CLI show values this way).

    Workflows may return what the codec keeps (bytes, datetimes, Decimals, sets, UUIDs,
    tuples); JSON has none of those, so each gets its usual text form: base64 for bytes,
    ISO 8601 for times, a string for Decimal (no precision lost), a list for sets.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        items = [jsonable(item) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return str(value)  # Decimal (no precision lost), UUID, anything else: its text


def _key(key: Any) -> str:
    return key if isinstance(key, str) else str(jsonable(key))
