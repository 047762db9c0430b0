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
import threading
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

# Containers nested deeper than this are refused at encode time (see _depth_path).
MAX_DEPTH = 128
_CONTAINERS = (list, tuple, set, frozenset)
_NESTING = (dict, *_CONTAINERS)
_NESTING_TYPES = frozenset(_NESTING)


def _default(obj: Any) -> msgpack.ExtType:
    # Exact types only: strict_types sends subclasses (IntEnum, OrderedDict, a datetime
    # subclass, ...) here too, and storing their base value would hand back another type
    # after a crash, so they are refused like any unknown type.
    kind = type(obj)
    if kind is _dt.datetime:
        return msgpack.ExtType(_EXT_DATETIME, obj.isoformat().encode())
    if kind is _dt.date:
        return msgpack.ExtType(_EXT_DATE, obj.isoformat().encode())
    if kind is _dt.timedelta:
        return msgpack.ExtType(_EXT_TIMEDELTA, _pack([obj.days, obj.seconds, obj.microseconds]))
    if kind is decimal.Decimal:
        return msgpack.ExtType(_EXT_DECIMAL, str(obj).encode())
    if kind is frozenset:
        return msgpack.ExtType(_EXT_FROZENSET, _pack(_sorted_if_possible(obj)))
    if kind is set:
        return msgpack.ExtType(_EXT_SET, _pack(_sorted_if_possible(obj)))
    if kind is tuple:
        return msgpack.ExtType(_EXT_TUPLE, _pack(list(obj)))
    if kind is uuid.UUID:
        return msgpack.ExtType(_EXT_UUID, obj.bytes)
    if isinstance(obj, _SUPPORTED):
        base = _base_name(obj)
        raise TypeError(f"a subclass of {base} would come back as another type; use {base}(x)")
    raise TypeError(f"cannot encode {kind.__name__}")


_SUPPORTED = (
    bool, int, float, str, bytes, list, dict, tuple, set, frozenset,
    _dt.datetime, _dt.date, _dt.timedelta, decimal.Decimal, uuid.UUID,
)  # fmt: skip


def _base_name(obj: Any) -> str:
    return next(base.__name__ for base in _SUPPORTED if isinstance(obj, base))


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


_PACKER_BUFFER = 4096
_PACKER_OPTIONS: dict[str, Any] = {
    "default": _default,
    "use_bin_type": True,
    "strict_types": True,
    "buf_size": _PACKER_BUFFER,
}


class _IdlePackers(threading.local):
    """Packers kept for reuse, per thread. ``msgpack.packb`` makes a Packer for every value
    and allocates it a 256 KiB buffer, for values mostly tens of bytes; every step encodes
    three. A Packer is taken from here while it packs, so a nested pack (a tuple's items,
    from ``_default``) takes another, and one whose buffer grew past its first size is
    dropped rather than kept. ``Packer.pack`` empties the buffer whether it returns or raises.
    """

    def __init__(self) -> None:
        self.packers: list[msgpack.Packer] = []


_idle = _IdlePackers()


def _pack(value: Any) -> bytes:
    idle = _idle.packers
    packer = idle.pop() if idle else msgpack.Packer(**_PACKER_OPTIONS)
    packed: bytes = packer.pack(value)
    if len(packed) <= _PACKER_BUFFER:
        idle.append(packer)
    return packed


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


def encode(value: Any, what: str = "value") -> bytes:
    """Encode ``value``; on failure raise ``CodecError`` naming the path inside it."""
    kind = type(value)
    # Only a container holding containers can be too deep: scalars and flat containers (a
    # step's record, most results) are told apart here, without a call.
    if kind in _NESTING_TYPES and not _NESTING_TYPES.isdisjoint(
        map(type, value.values() if kind is dict else value)
    ):
        too_deep = _depth_path(value, what)
        if too_deep:
            raise CodecError(
                f"cannot encode {what}: it nests deeper than {MAX_DEPTH} levels "
                f"(at {too_deep}); flatten the data",
                path=too_deep,
            )
    idle = _idle.packers  # _pack, inlined: every step encodes three values
    packer = idle.pop() if idle else msgpack.Packer(**_PACKER_OPTIONS)
    try:
        packed: bytes = packer.pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        path, bad = _find_unencodable(value, what)
        if not path:  # no single part to blame: the value as a whole
            path, bad = what, value
        if type(bad) is str:  # the only str the codec refuses holds a lone surrogate
            reason = "the text holds a lone surrogate, which UTF-8 cannot encode; fix the text"
        else:
            reason = (
                f"{type(bad).__name__} is not supported ({exc}); use plain data (dict, list, "
                "str, int, float, bool, None, bytes, datetime, Decimal, set, tuple, UUID)"
            )
        raise CodecError(f"cannot encode {path}: {reason}", path=path) from None
    if len(packed) <= _PACKER_BUFFER:
        idle.append(packer)
    return packed


_Link = tuple[Any, Any, bool] | None
"""(parent link, key or index, whether a dict key): the way back to the top, for the path.
An alias at module level: built inside the function, it cost more than the walk itself."""


def _depth_path(value: Any, what: str) -> str:
    """The path of a container nested deeper than ``MAX_DEPTH``, or ``""``.

    Walked with an explicit stack, so a hostile value cannot exhaust Python's recursion
    limit here, and bounded up front so a value that encodes can also always be decoded.
    Only containers are pushed; each carries a link to its parent to rebuild the path.
    """
    if type(value) not in _NESTING_TYPES:
        return ""
    members = value.values() if type(value) is dict else value
    if _NESTING_TYPES.isdisjoint(map(type, members)):
        return ""  # one level deep (a step's record, most results): nothing to walk
    stack: list[tuple[Any, int, _Link]] = [(value, 1, None)]
    while stack:
        item, depth, link = stack.pop()
        if depth > MAX_DEPTH:
            parts: list[str] = []
            while link is not None:
                link, key, keyed = link
                parts.append(f"[{key!r}]" if keyed else f"[{key}]")
            return what + "".join(reversed(parts))
        # Labels are built only on the way out of a too-deep value: encoding a step's record
        # walks its containers and formats nothing.
        keyed = type(item) is dict
        children: Any = item.items() if keyed else enumerate(item)
        stack.extend(
            (child, depth + 1, (link, key, keyed))
            for key, child in children
            if type(child) in _NESTING_TYPES
        )
    return ""


def decode(data: bytes) -> Any:
    """Decode bytes written by ``encode``."""
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)
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
    if type(value) is dict:
        for key, item in value.items():
            if not _packs(key):
                return f"{path} key {key!r}", key
            found = _find_unencodable(item, f"{path}[{key!r}]")
            if found[0]:
                return found
        return "", None
    if type(value) in _CONTAINERS:
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
