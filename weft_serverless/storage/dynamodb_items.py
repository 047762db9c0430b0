"""How the storage contract maps onto DynamoDB items, conditions, tokens and key ranges.

Pure functions only: no client, no I/O, so every mapping rule is testable on its own and the
adapter (``dynamodb.py``) stays a thin sequence of calls. See
``docs/decisions/0003-dynamodb-mapping.md`` for why each rule is what it is.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from weft_serverless.errors import StorageLimitError
from weft_serverless.storage.base import Key, SortRange, prefix_end
from weft_serverless.storage.dynamodb_meter import (
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_BYTES,
    item_size,
    write_units,
)
from weft_serverless.storage.dynamodb_schema import (
    DIGEST_ATTRIBUTE,
    OFFLOAD_ATTRIBUTE,
    PARTITION_ATTRIBUTE,
    SORT_ATTRIBUTE,
    VALUE_ATTRIBUTE,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    Item = dict[str, AttributeValueTypeDef]

DIGEST_BYTES = 16
ABSENT_CONDITION = f"attribute_not_exists({PARTITION_ATTRIBUTE})"
DIGEST_CONDITION = f"{DIGEST_ATTRIBUTE} = :h"
# Fixed namespace so a token depends on the request alone, in every process and release.
_TOKEN_NAMESPACE = uuid.UUID("6f1d0c3e-2b7a-5d51-9a4e-77c1f0e2a9b3")

ActionKind = Literal["Put", "Delete", "ConditionCheck"]


def value_digest(value: bytes) -> bytes:
    """The 128-bit BLAKE2b digest stored in ``h`` and compared by byte conditions."""
    return hashlib.blake2b(value, digest_size=DIGEST_BYTES).digest()


def key_attributes(key: Key) -> Item:
    return {PARTITION_ATTRIBUTE: {"S": key.partition}, SORT_ATTRIBUTE: {"S": key.sort}}


def inline_item(key: Key, value: bytes, digest: bytes) -> Item:
    item = key_attributes(key)
    item[VALUE_ATTRIBUTE] = {"B": value}
    item[DIGEST_ATTRIBUTE] = {"B": digest}
    return item


def offloaded_item(key: Key, object_key: str, digest: bytes) -> Item:
    item = key_attributes(key)
    item[OFFLOAD_ATTRIBUTE] = {"S": object_key}
    item[DIGEST_ATTRIBUTE] = {"B": digest}
    return item


def condition_expression(expected: bytes | None) -> tuple[str, dict[str, Any]]:
    """``expected`` as a ConditionExpression and its values: absence, or the value's digest."""
    if expected is None:
        return ABSENT_CONDITION, {}
    return DIGEST_CONDITION, {":h": {"B": value_digest(expected)}}


@dataclass(frozen=True, slots=True)
class Action:
    """One key's part of a write: its item (puts), its condition, and what to upload first.

    ``conditioned`` separates "no condition" from "must be absent" (``expected=None``).
    ``old_size`` is the stored size the condition implies (0 when unknown or absent); the
    meter bills a replacing write by the larger item, as DynamoDB does.
    """

    key: Key
    kind: ActionKind
    conditioned: bool = False
    expected: bytes | None = None
    item: Item | None = None
    digest: bytes | None = None
    blob: bytes | None = None
    old_size: int = 0

    @property
    def size(self) -> int:
        """Bytes this action puts in the request (the item, or only the key)."""
        return item_size(self.item if self.item is not None else key_attributes(self.key))

    def units(self) -> int:
        """Write units of this action done once: by the larger of new and replaced item; a
        condition check by the item the condition implies, since a transaction bills its
        every item as a write (ADR 0052)."""
        new = self.size if self.kind == "Put" else 0
        return write_units(max(new, self.old_size))

    def condition_params(self) -> dict[str, Any]:
        if not self.conditioned:
            return {}
        expression, values = condition_expression(self.expected)
        params: dict[str, Any] = {"ConditionExpression": expression}
        if values:
            params["ExpressionAttributeValues"] = values
        return params

    def transact_item(self, table: str) -> dict[str, Any]:
        """This action as one element of ``TransactItems``."""
        body: dict[str, Any] = {"TableName": table, **self.condition_params()}
        if self.kind == "Put":
            body["Item"] = self.item
        else:
            body["Key"] = key_attributes(self.key)
        return {self.kind: body}


def check_limits(actions: Sequence[Action], transactional: bool) -> None:
    """Refuse, before sending, an item over 400 KB or a transaction over 4 MB in total."""
    total = 0
    for action in actions:
        size = action.size
        if size > MAX_ITEM_BYTES:
            raise StorageLimitError("item size", size, MAX_ITEM_BYTES, f"key {action.key!r}")
        total += size
    if transactional and total > MAX_TRANSACTION_BYTES:
        raise StorageLimitError(
            "transaction size",
            total,
            MAX_TRANSACTION_BYTES,
            f"{len(actions)} items; configure offload_bucket= or split the work",
        )


def committed(actions: Sequence[Action], current: Mapping[Key, Mapping[str, Any] | None]) -> bool:
    """Whether ``current`` (read back after an ambiguous attempt) shows the commit landed.

    It did if every put key holds its intended digest and every deleted key is absent. A
    batch that writes nothing proves nothing, so its failed condition stands.
    """
    written = [action for action in actions if action.kind != "ConditionCheck"]
    for action in written:
        item = current.get(action.key)
        if action.kind == "Delete" and item is not None:
            return False
        if action.kind == "Put" and (
            item is None or item.get(DIGEST_ATTRIBUTE, {}).get("B") != action.digest
        ):
            return False
    return bool(written)


def commit_token(table: str, actions: Sequence[Action]) -> str:
    """A ``ClientRequestToken`` derived from the normalised request alone.

    The same logical commit yields the same 36-character token on every retry and in every
    process, so DynamoDB can recognise a replay; a different request never shares it.
    """
    digest = hashlib.blake2b(digest_size=32)

    def feed(part: bytes) -> None:
        digest.update(len(part).to_bytes(4, "big") + part)

    feed(table.encode())
    for action in sorted(actions, key=lambda a: a.key):
        feed(action.kind.encode())
        feed(action.key.partition.encode())
        feed(action.key.sort.encode())
        feed(action.digest or b"")
        if action.conditioned:
            feed(b"absent" if action.expected is None else b"=" + value_digest(action.expected))
    return str(uuid.uuid5(_TOKEN_NAMESPACE, digest.hexdigest()))


@dataclass(frozen=True, slots=True)
class KeyCondition:
    """A Query's ``KeyConditionExpression`` for one partition and range.

    ``edges`` counts strict bounds that a ``BETWEEN`` still returns; the caller filters them
    out with ``SortRange.contains`` and asks for that many extra items per page.
    """

    expression: str
    values: dict[str, Any]
    edges: int = 0


def key_condition(partition: str, rng: SortRange) -> KeyCondition | None:
    """The tightest key condition for ``rng``; ``None`` when the range is empty.

    A prefix range becomes ``begins_with``; a one-sided range a single comparison; two
    inclusive sides ``BETWEEN``. DynamoDB has no strict ``BETWEEN``, so a strict side of a
    two-sided range is sent inclusive and its edge dropped client-side.
    """
    values: dict[str, Any] = {":pk": {"S": partition}}
    base = f"{PARTITION_ATTRIBUTE} = :pk"
    low, high = rng.low, rng.high
    if low is None and high is None:
        return KeyCondition(base, values)
    if low is not None and high is not None:
        if low > high or (low == high and not (rng.low_inclusive and rng.high_inclusive)):
            return None
        values[":lo"] = {"S": low}
        if rng.low_inclusive and not rng.high_inclusive and prefix_end(low) == high:
            return KeyCondition(f"{base} AND begins_with({SORT_ATTRIBUTE}, :lo)", values)
        values[":hi"] = {"S": high}
        edges = (not rng.low_inclusive) + (not rng.high_inclusive)
        return KeyCondition(f"{base} AND {SORT_ATTRIBUTE} BETWEEN :lo AND :hi", values, edges)
    if low is not None:
        values[":lo"] = {"S": low}
        op = ">=" if rng.low_inclusive else ">"
        return KeyCondition(f"{base} AND {SORT_ATTRIBUTE} {op} :lo", values)
    assert high is not None
    values[":hi"] = {"S": high}
    op = "<=" if rng.high_inclusive else "<"
    return KeyCondition(f"{base} AND {SORT_ATTRIBUTE} {op} :hi", values)
