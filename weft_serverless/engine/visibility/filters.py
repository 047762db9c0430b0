"""A list or count filter, checked before anything is read (ADR 0030).

``where`` maps an attribute to a value (equality) or to ``(operator, value)``; operators are
``OPERATORS``. Values are checked against the attribute's declared type when a registered
workflow type declares it (``100`` then matches a float attribute's ``100.0``); an engine that
registers no type (the CLI's) takes them as given.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from weft_serverless.engine.config import check_page
from weft_serverless.errors import InvalidArgumentError, InvalidFilterError
from weft_serverless.search_attributes import check_tags, coerce, value_token
from weft_serverless.time_values import parse_instant
from weft_serverless.workflow import WorkflowDefinition

OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "prefix")
"""``==`` and ``in`` are read from the index; the others are applied to the items read."""
Order = Literal["oldest", "newest"]
GROUPS = ("status", "workflow_type")


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    op: str
    value: Any  # a tuple of values for ``in``

    def matches(self, attributes: Mapping[str, Any]) -> bool:
        if self.name not in attributes:
            return self.op == "!="
        have = attributes[self.name]
        if self.op == "in":
            return any(_same(have, v) for v in self.value)
        if self.op == "==":
            return _same(have, self.value)
        if self.op == "!=":
            return not _same(have, self.value)
        if self.op == "prefix":
            return isinstance(have, str) and have.startswith(self.value)
        try:
            return bool(_COMPARE[self.op](have, self.value))
        except TypeError:
            return False


_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and value_token(a) == value_token(b)


@dataclass(frozen=True, slots=True)
class Filter:
    status: str | None = None
    workflow_type: str | None = None
    terms: tuple[Term, ...] = ()
    tags: tuple[str, ...] = ()
    started_after: float | None = None  # inclusive, epoch seconds
    started_before: float | None = None  # exclusive
    id_prefix: str | None = None
    order: Order = "oldest"
    type_prefix: str | None = None

    def matches(self, item: Mapping[str, Any], status: str, workflow_id: str) -> bool:
        """Whether an index item (and the run it names) passes every filter."""
        if self.status is not None and status != self.status:
            return False
        if self.workflow_type is not None and item.get("type") != self.workflow_type:
            return False
        if self.type_prefix is not None and not str(item.get("type", "")).startswith(
            self.type_prefix
        ):
            return False
        if self.id_prefix is not None and not workflow_id.startswith(self.id_prefix):
            return False
        have_tags = set(item.get("tags") or ())
        if any(tag not in have_tags for tag in self.tags):
            return False
        attributes = item.get("sa") or {}
        return all(term.matches(attributes) for term in self.terms)


def make_filter(
    definitions: Mapping[str, WorkflowDefinition],
    status: str | None = None,
    workflow_type: str | None = None,
    where: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    started_after: float | datetime.datetime | None = None,
    started_before: float | datetime.datetime | None = None,
    id_prefix: str | None = None,
    order: str = "oldest",
    type_prefix: str | None = None,
) -> Filter:
    check_page(status, 1, None)
    if workflow_type is not None and not isinstance(workflow_type, str):
        raise InvalidFilterError("workflow_type must be a string", "workflow_type")
    if order not in ("oldest", "newest"):
        raise InvalidFilterError(f"order must be 'oldest' or 'newest'; got {order!r}", "order")
    if id_prefix is not None and (not isinstance(id_prefix, str) or not id_prefix):
        raise InvalidFilterError("id_prefix must be a non-empty string", "id_prefix")
    if type_prefix is not None and (not isinstance(type_prefix, str) or not type_prefix):
        raise InvalidFilterError("type_prefix must be a non-empty string", "type_prefix")
    if where is not None and not isinstance(where, Mapping):
        raise InvalidFilterError("where must be a dict of {attribute: value or (op, value)}")
    declared = _declared(definitions, workflow_type)
    terms = tuple(_term(name, spec, declared.get(name)) for name, spec in (where or {}).items())
    return Filter(
        status,
        workflow_type,
        terms,
        tuple(check_tags(tags)),
        _seconds(started_after, "started_after"),
        _seconds(started_before, "started_before"),
        id_prefix,
        "newest" if order == "newest" else "oldest",
        type_prefix,
    )


def _declared(
    definitions: Mapping[str, WorkflowDefinition], workflow_type: str | None
) -> dict[str, type]:
    """Attribute types the registered definitions declare (the named type's, when given)."""
    out: dict[str, type] = {}
    for name, definition in definitions.items():
        if workflow_type is None or name == workflow_type:
            out.update(definition.search_attributes)
    return out


def _term(name: object, spec: Any, kind: type | None) -> Term:
    if not isinstance(name, str) or not name:
        raise InvalidFilterError(f"where names an attribute by a non-empty string, not {name!r}")
    op, value = ("==", spec)
    if isinstance(spec, tuple | list):
        if len(spec) != 2 or spec[0] not in OPERATORS:
            raise InvalidFilterError(
                f"where[{name!r}] must be a value or (operator, value) with an operator of "
                f"{', '.join(OPERATORS)}; got {spec!r}",
                "where",
            )
        op, value = spec
    if op == "in":
        if isinstance(value, str) or not isinstance(value, Iterable) or not value:
            raise InvalidFilterError(f"where[{name!r}] 'in' takes a non-empty list", "where")
        return Term(name, op, tuple(dict.fromkeys(_value(name, v, kind) for v in value)))
    if op == "prefix" and not isinstance(value, str):
        raise InvalidFilterError(f"where[{name!r}] 'prefix' takes a string", "where")
    return Term(name, op, _value(name, value, kind))


def _value(name: str, value: Any, kind: type | None) -> Any:
    try:
        if kind is not None:
            return coerce(name, kind, value)
        value_token(value)  # a type a search attribute can have
    except InvalidFilterError:
        raise
    except Exception as exc:
        raise InvalidFilterError(f"where[{name!r}]: {exc}", "where") from None
    return value


def _seconds(value: float | datetime.datetime | None, what: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_instant(value, what)
    except InvalidArgumentError as exc:
        raise InvalidFilterError(str(exc), what) from None
