"""Records by step slot, indexed by the step scope they lie under.

A finishing step looks for what it and its branches left behind (a pending fact, a retry
record, each with a timer): the keys at ``slot`` or under it (``slot.0``, ``slot.0.1``, ...).
Walking the whole table for that made every commit cost the run's history, so a long run
with retries or sleeps cost quadratic time. ``SlotTable`` keeps, for every scope a key lies
in, the keys under it, so that lookup costs only what the step itself left.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

V = TypeVar("V")
D = TypeVar("D")


def scopes(key: str) -> Iterator[str]:
    """The slots whose step a key belongs to: the key itself and each dotted prefix of it
    (``3.1@2`` lies under ``3`` and is ``3.1@2``; it is not under ``3.1``)."""
    yield key
    end = key.find(".")
    while end != -1:
        yield key[:end]
        end = key.find(".", end + 1)


class SlotTable(dict[str, V]):
    """A dict of records by slot that also answers ``under(slot)`` without a walk.

    Every mutation keeps the index: it is a dict subclass, so readers use it as a dict.
    ``under`` yields keys in the table's insertion order, as a filtered walk would.
    """

    __slots__ = ("_under",)

    def __init__(self, items: Mapping[str, V] | Iterable[tuple[str, V]] = ()) -> None:
        super().__init__()
        self._under: dict[str, dict[str, None]] = {}
        self.update(items)

    def under(self, slot: str) -> list[str]:
        """The keys equal to ``slot`` or below it (``slot.``...), oldest first."""
        found = self._under.get(slot)
        return list(found) if found else []

    def __setitem__(self, key: str, value: V) -> None:
        if key not in self:
            for scope in scopes(key):
                self._under.setdefault(scope, {})[key] = None
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._forget(key)

    def setdefault(self, key: str, default: V) -> V:
        if key not in self:
            self[key] = default
        return self[key]

    @overload
    def pop(self, key: str, /) -> V: ...

    @overload
    def pop(self, key: str, default: V | D, /) -> V | D: ...

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = super().pop(key)
            self._forget(key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[str, V]:
        key, value = super().popitem()
        self._forget(key)
        return key, value

    def clear(self) -> None:
        super().clear()
        self._under.clear()

    def update(self, *others: Any, **named: V) -> None:
        for other in others:
            pairs = other.items() if isinstance(other, Mapping) else other
            for key, value in pairs:
                self[key] = value
        for key, value in named.items():
            self[key] = value

    def __ior__(self, other: Any) -> SlotTable[V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def _forget(self, key: str) -> None:
        for scope in scopes(key):
            found = self._under.get(scope)
            if found is not None:
                found.pop(key, None)
                if not found:
                    del self._under[scope]
