"""The DynamoDB write path: ops and conditions in, one atomic request out, its outcome settled.

A batch becomes one ``Action`` per key (a key's condition merged into its write), sent as a
single ``PutItem``/``DeleteItem`` when it is alone and as ``TransactWriteItems`` with a
request-derived token otherwise. A failed condition after an attempt that may have applied
is settled by reading the written keys back, never guessed (ADR 0003). Every request is
billed here as DynamoDB bills it, refused ones included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from weft_serverless.errors import StorageError
from weft_serverless.storage.base import Condition, Key, Op, Put
from weft_serverless.storage.dynamodb_faults import ConditionFailed, Retrier
from weft_serverless.storage.dynamodb_items import (
    Action,
    check_limits,
    commit_token,
    committed,
    key_attributes,
    value_digest,
)
from weft_serverless.storage.dynamodb_meter import (
    TRANSACTION_MULTIPLIER,
    item_size,
    read_units,
    write_units,
)
from weft_serverless.storage.dynamodb_offload import Offload
from weft_serverless.storage.dynamodb_schema import DIGEST_ATTRIBUTE, VALUE_ATTRIBUTE

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from weft_serverless.storage.dynamodb_items import Item

BATCH_WRITE_CHUNK = 25
READ_BACK_CHUNK = 25  # TransactGetItems allows 100; moto allows 25.


class Writes:
    """Sends the adapter's writes to one table and reports whether their conditions held.

    Args:
        table_name: The table written to.
        client: Returns the DynamoDB client (built lazily by the adapter).
        retrier: Sends each request; its meter receives the bill.
        offload: Decides where each value lives and uploads offloaded values first.
        get_item: A metered consistent read, used to check a lone condition.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: Callable[[], DynamoDBClient],
        retrier: Retrier,
        offload: Offload,
        get_item: Callable[[Key], Item | None],
    ) -> None:
        self._table = table_name
        self._client = client
        self._retrier = retrier
        self._meter = retrier.meter
        self._offload = offload
        self._get_item = get_item

    def batch(self, ops: Sequence[Op]) -> None:
        actions = [self._action(op, {}) for op in sorted(ops, key=lambda op: op.key)]
        if not self._write(actions):
            raise StorageError("an unconditional write reported a failed condition")

    def conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        expected = {condition.key: condition.expected for condition in conditions}
        actions = [self._action(op, expected) for op in ops]
        actions += [self._check(key, value) for key, value in expected.items()]
        actions.sort(key=lambda action: action.key)
        if len(actions) == 1 and actions[0].kind == "ConditionCheck":
            return self._holds(actions[0])
        return self._write(actions)

    def delete_chunk(self, keys: Sequence[Key]) -> None:
        """Delete up to 25 keys with ``BatchWriteItem``, resending unprocessed ones to the end."""
        pending: list[Any] = [{"DeleteRequest": {"Key": key_attributes(k)}} for k in keys]
        attempts = self._retrier.attempts("BatchWriteItem")
        while pending:
            request = {self._table: pending}
            response = self._retrier.call(
                "BatchWriteItem", partial(self._client().batch_write_item, RequestItems=request)
            )
            left = list(response.get("UnprocessedItems", {}).get(self._table, []))
            self._meter.record("BatchWriteItem", write_units=len(pending) - len(left))
            pending = left
            if pending:
                attempts.last = f"{len(pending)} UnprocessedItems"
                attempts.begin()
                attempts.backoff()

    # -- actions -------------------------------------------------------------------------------

    def _action(self, op: Op, expected: dict[Key, bytes | None]) -> Action:
        """Build a key's action, merging (and consuming) that key's condition if any."""
        conditioned = op.key in expected
        old = expected.pop(op.key, None)
        old_size = 0 if old is None else self._offload.stored_size(op.key, old)
        if not isinstance(op, Put):
            return Action(op.key, "Delete", conditioned, old, old_size=old_size)
        value = bytes(op.value)
        digest = value_digest(value)
        item = self._offload.item(op.key, value, digest)
        blob = value if self._offload.offloads(value) else None
        return Action(op.key, "Put", conditioned, old, item, digest, blob, old_size)

    def _check(self, key: Key, expected: bytes | None) -> Action:
        size = 0 if expected is None else self._offload.stored_size(key, expected)
        return Action(key, "ConditionCheck", True, expected, old_size=size)

    def _holds(self, check: Action) -> bool:
        """A lone condition is one consistent read: cheaper than a transaction, as atomic."""
        item = self._get_item(check.key)
        if item is None or check.expected is None:
            return item is None and check.expected is None
        if VALUE_ATTRIBUTE in item:
            return bytes(item[VALUE_ATTRIBUTE]["B"]) == check.expected
        return item.get(DIGEST_ATTRIBUTE, {}).get("B") == value_digest(check.expected)

    # -- requests ------------------------------------------------------------------------------

    def _write(self, actions: list[Action]) -> bool:
        """Send the actions as one atomic write; ``False`` when a condition did not hold."""
        transactional = len(actions) > 1
        check_limits(actions, transactional)
        for action in actions:
            if action.blob is not None and action.digest is not None:
                self._offload.store(action.digest, action.blob)
        try:
            if transactional:
                self._transact(actions)
            else:
                self._write_one(actions[0])
        except ConditionFailed as failed:
            if not failed.maybe_applied:
                return False
            if len(actions) == 1:
                return committed(actions, {actions[0].key: failed.item})
            written = [a.key for a in actions if a.kind != "ConditionCheck"]
            return bool(written) and committed(actions, self._read_back(written))
        return True

    def _write_one(self, action: Action) -> None:
        params: dict[str, Any] = {"TableName": self._table, **action.condition_params()}
        if action.conditioned:
            # On failure DynamoDB returns the current item for free: it sizes the bill and
            # settles an ambiguous retry without another read.
            params["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        operation = "PutItem" if action.kind == "Put" else "DeleteItem"
        try:
            if action.kind == "Put":
                item = action.item or {}
                self._retrier.call(operation, lambda: self._client().put_item(**params, Item=item))
            else:
                key = key_attributes(action.key)
                self._retrier.call(operation, lambda: self._client().delete_item(**params, Key=key))
        except ConditionFailed as failed:
            # Billed too: 1 unit on an absent item, else sized like the write it refused.
            old = failed.item
            new = action.size if action.kind == "Put" else 0
            units = 1 if old is None else write_units(max(item_size(old), new))
            self._meter.record(operation, write_units=units)
            raise
        self._meter.record(operation, write_units=action.units(), bytes_written=action.size)

    def _transact(self, actions: list[Action]) -> None:
        items: list[Any] = [action.transact_item(self._table) for action in actions]
        token = commit_token(self._table, actions)
        # Every item twice, a ConditionCheck as a write of the item it checks (ADR 0052).
        units = sum(a.units() for a in actions)

        def bill() -> None:
            # A cancelled transaction is billed too; estimated here as if it had committed.
            self._meter.record(
                "TransactWriteItems",
                write_units=units * TRANSACTION_MULTIPLIER,
                bytes_written=sum(a.size for a in actions if a.kind == "Put"),
            )

        try:
            self._retrier.call(
                "TransactWriteItems",
                lambda: self._client().transact_write_items(
                    TransactItems=items, ClientRequestToken=token
                ),
            )
        except ConditionFailed:
            bill()
            raise
        bill()

    def _read_back(self, keys: list[Key]) -> dict[Key, Item | None]:
        found: dict[Key, Item | None] = {}
        for start in range(0, len(keys), READ_BACK_CHUNK):
            chunk = keys[start : start + READ_BACK_CHUNK]
            gets: list[Any] = [
                {"Get": {"TableName": self._table, "Key": key_attributes(key)}} for key in chunk
            ]
            response = self._retrier.call(
                "TransactGetItems",
                partial(self._client().transact_get_items, TransactItems=gets),
            )
            units = 0
            for key, answer in zip(chunk, response["Responses"], strict=True):
                found[key] = answer.get("Item")
                units += read_units(item_size(found[key] or {})) * TRANSACTION_MULTIPLIER
            self._meter.record("TransactGetItems", read_units=units)
        return found
