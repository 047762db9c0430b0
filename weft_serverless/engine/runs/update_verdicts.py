"""Reading an update validator's verdict: a rejection is whatever carries issues.

Validators come from many libraries, and each says "no" its own way: ``False``, a list of
issues, a raised (or returned) error, a Standard Schema failure result (``{"issues": [...]}``),
a pydantic ``ValidationError`` (``.errors()`` entries with ``loc``). Every other answer
accepts: ``None``, ``True``, the validated value itself (``Order.model_validate(p)`` returns
the model), a Standard Schema success result (``{"value": ...}``), an empty issue list. As in
Weft, only found issues reject; ``False`` rejects too, since no one returns it to say yes
(docs/features.md, Updates).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from weft_serverless.errors import UpdateValidationError

Issue = dict[str, object]


def validate(validator: Callable[[Any], Any], payload: Any, update_name: str) -> None:
    """Run ``validator(payload)``; raise ``UpdateValidationError`` if it rejected."""
    try:
        verdict = validator(payload)
    except UpdateValidationError:
        raise
    except Exception as exc:
        raise UpdateValidationError(_issues_of_error(exc)) from None
    if verdict is False:
        raise UpdateValidationError([{"message": "rejected by validator", "path": None}])
    if isinstance(verdict, BaseException):
        raise UpdateValidationError(_issues_of_error(verdict))
    carried = _issues_of(verdict)
    if carried:
        raise UpdateValidationError(carried)


def _issues_of_error(exc: BaseException) -> list[Issue]:
    """A raised (or returned) error's issues: its own, else one naming it."""
    if isinstance(exc, UpdateValidationError):
        return list(exc.issues)
    return _issues_of(exc) or [{"message": str(exc) or type(exc).__name__, "path": None}]


def _issues_of(value: Any) -> list[Issue] | None:
    """The issues a verdict or error carries, or None when it carries none."""
    if isinstance(value, list | tuple):
        return [_issue(item) for item in value] or None
    found = value.get("issues") if isinstance(value, Mapping) else getattr(value, "issues", None)
    if isinstance(found, list | tuple) and found:
        return [_issue(item) for item in found]
    errors = getattr(value, "errors", None)
    if not callable(errors) or isinstance(value, Mapping):
        return None
    try:
        entries = errors()
    except Exception:
        return None
    if not isinstance(entries, list | tuple) or not entries:
        return None
    if not all(isinstance(entry, Mapping) and "loc" in entry for entry in entries):
        return None
    return [
        {"message": str(entry.get("msg", entry)), "path": _path(entry["loc"])} for entry in entries
    ]


def _issue(item: Any) -> Issue:
    if isinstance(item, Mapping):
        return {"message": str(item.get("message", item)), "path": _path(item.get("path"))}
    if isinstance(item, str):
        return {"message": item, "path": None}
    message = getattr(item, "message", None)
    if message is not None:
        return {"message": str(message), "path": _path(getattr(item, "path", None))}
    return {"message": str(item), "path": None}


def _path(raw: Any) -> list[object] | None:
    """A path as a list of keys; Standard Schema segments ``{"key": k}`` become ``k``."""
    if raw is None:
        return None
    segments = list(raw) if isinstance(raw, list | tuple) else [raw]
    return [_segment(segment) for segment in segments]


def _segment(segment: Any) -> object:
    if isinstance(segment, Mapping) and "key" in segment:
        segment = segment["key"]
    elif not isinstance(segment, str | int) and hasattr(segment, "key"):
        segment = segment.key
    return (
        segment
        if isinstance(segment, str | int) and not isinstance(segment, bool)
        else str(segment)
    )
