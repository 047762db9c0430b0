"""In-process moto DynamoDB for tests, made safe for the engine's own threads.

moto's DynamoDB models hold no lock. An engine is not single-threaded: the invocation
heartbeat renews claims on a thread while the caller's thread commits steps, and automatic
mode runs a background driver. Two requests interleaving inside moto corrupt its state
(``RuntimeError: dictionary changed size during iteration``) or let two conditional writes
on one item both pass, neither of which real DynamoDB does. Serialising every request into
moto with one process-wide lock restores a linearizable table, so a test that fails is the
engine's fault, never moto's.

moto and boto3 are imported only when these helpers are called: ``weft_serverless.testing``
imports without them.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from weft_serverless.errors import ConfigurationError

if TYPE_CHECKING:
    from weft_serverless.storage.dynamodb import DynamoDBStorage

__all__ = ["MotoDynamoDB", "moto_dynamodb", "serialise_moto"]

MOTO_LOCK = threading.RLock()
"""Held around every in-process moto request once ``serialise_moto`` ran (re-entrant, so a
server on the same lock may call back into moto)."""

_INSTALL_LOCK = threading.Lock()
_SERIALISED = "_weft_serialised"


def serialise_moto() -> threading.RLock:
    """Run every in-process moto request under ``MOTO_LOCK``; return the lock.

    Process-wide and idempotent: it wraps moto's request entry point once. It also makes
    moto's ``TransactWriteItems`` roll back a cancelled transaction from copies of the items
    it names rather than of whole tables, which keeps a transaction on a table of thousands
    of items in milliseconds instead of seconds, and a ``Query`` on the table's key read one
    partition instead of sorting the whole table. Call it before the threads start if you run
    ``mock_aws`` yourself; ``moto_dynamodb`` calls it for you.
    Pass the returned lock to a moto server sharing the process (``LockedMotoServer(lock=)``)
    to serialise both together.
    """
    try:
        from moto.core.botocore_stubber import BotocoreStubber
        from moto.dynamodb import models
    except ImportError:
        raise ConfigurationError(
            "moto is not installed; pip install 'weft-serverless[local]' to test against an "
            "in-process DynamoDB"
        ) from None
    with _INSTALL_LOCK:
        original = BotocoreStubber.process_request
        if not getattr(original, _SERIALISED, False):

            def locked(self: Any, request: Any) -> Any:
                with MOTO_LOCK:
                    return original(self, request)

            setattr(locked, _SERIALISED, True)
            BotocoreStubber.process_request = locked  # type: ignore[method-assign]
        _undo_log_instead_of_table_copies(models)
        _query_reads_one_partition()
    return MOTO_LOCK


def _undo_log_instead_of_table_copies(models: Any) -> None:
    """moto snapshots every table a transaction touches (a deep copy, once per transaction
    item) to roll back a cancelled one, which makes one transaction on a table of thousands of
    items take seconds. Instead, keep a deep copy of just the items the transaction names and
    put them back (or delete the ones that were absent) if it fails: the same outcome for
    every read. The module's ``copy`` is swapped only under ``MOTO_LOCK``, which every request
    holds, so no other request sees the swap."""
    from moto.dynamodb.models.table import Table

    original = models.DynamoDBBackend.transact_write_items
    if getattr(original, _SERIALISED, False) or not hasattr(models, "copy"):
        return

    def no_table_copy(obj: Any, memo: Any = None) -> Any:
        return obj if isinstance(obj, Table) else copy.deepcopy(obj, memo)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with MOTO_LOCK:
            undo = [_snapshot(self, entry) for entry in transact_items]
            namespace = vars(models)
            namespace["copy"] = SimpleNamespace(deepcopy=no_table_copy)
            try:
                original(self, transact_items)
            except BaseException:
                for saved in reversed(undo):
                    if saved is not None:
                        _restore(self, *saved)
                raise
            finally:
                namespace["copy"] = copy

    setattr(transact_write_items, _SERIALISED, True)
    models.DynamoDBBackend.transact_write_items = transact_write_items


def _snapshot(backend: Any, entry: dict[str, Any]) -> tuple[str, dict[str, Any], Any] | None:
    """(table, key, deep copy of the item or None) for one transaction item; None when the
    item is malformed (moto then refuses the transaction before writing it)."""
    try:
        ((_, op),) = entry.items()
        table_name = op["TableName"]
        table = backend.get_table(table_name)
        if "Item" in op:
            names = (table.hash_key_attr, table.range_key_attr)
            key = {name: op["Item"][name] for name in names if name is not None}
        else:
            key = op["Key"]
        item = backend.get_item(table_name, key)
    except Exception:
        return None
    return table_name, key, None if item is None else copy.deepcopy(item)


def _restore(backend: Any, table_name: str, key: dict[str, Any], item: Any) -> None:
    if item is None:
        backend.delete_item(table_name, key)
    else:
        backend.put_item(table_name, item.to_json()["Attributes"])


def _query_reads_one_partition() -> None:
    """moto answers a ``Query`` on the table's key by sorting every item of the table, then
    keeping one partition's; reading that partition alone gives the same items in the same
    order (they are sorted by sort key afterwards either way), in time that no longer grows
    with the table. Other queries (indexes, multi-attribute keys) are left as they are."""
    from moto.dynamodb.models.table import Table

    original = Table.query
    if getattr(original, _SERIALISED, False):
        return

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is not None or hash_key is None or not self.range_key_attr:
            return original(self, hash_key, *args, **kwargs)
        with MOTO_LOCK:
            self.all_items = lambda: list(self.items.get(hash_key, {}).values())
            try:
                return original(self, hash_key, *args, **kwargs)
            finally:
                del self.all_items

    setattr(query, _SERIALISED, True)
    Table.query = query  # type: ignore[method-assign]


@dataclass
class MotoDynamoDB:
    """An in-process DynamoDB (moto) whose requests are serialised by ``lock``.

    Attributes:
        client: A boto3 DynamoDB client on the mock, configured like the adapter's own.
        region: Its region.
        lock: The lock every moto request holds.
    """

    client: Any
    region: str
    lock: threading.RLock

    def create_table(self, name: str | None = None) -> str:
        """Create a table with the engine's schema (a fresh name when omitted); return it."""
        from weft_serverless.storage.dynamodb import create_table

        table = name or f"weft-{uuid.uuid4().hex[:12]}"
        create_table(self.client, table)
        return table

    def storage(self, table: str | None = None, **options: Any) -> DynamoDBStorage:
        """A ``DynamoDBStorage`` on ``table`` (created if missing; a fresh one when omitted).

        ``options`` go to ``DynamoDBStorage``; every handle shares this mock's data.
        """
        from weft_serverless.storage.dynamodb import DynamoDBStorage

        return DynamoDBStorage(self.create_table(table), client=self.client, **options)


@contextmanager
def moto_dynamodb(*, region: str = "us-east-1") -> Iterator[MotoDynamoDB]:
    """Run the block against an in-process, thread-safe moto DynamoDB.

    Starts ``moto.mock_aws`` (fake credentials, no request leaves the process) after
    ``serialise_moto``, and stops it on exit, which discards every table. Starting a mock
    costs far more than creating a table: for many tests, enter it once (a session-scoped
    fixture) and give each test a fresh table with ``storage()``::

        with moto_dynamodb() as moto:
            te = TestEngine(workflows, storage=moto.storage(), ownership="workflow-lease")
    """
    lock = serialise_moto()
    import boto3
    from botocore.config import Config
    from moto import mock_aws

    with mock_aws():
        config = Config(
            connect_timeout=2,
            read_timeout=10,
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=32,
        )
        client = boto3.session.Session().client("dynamodb", region_name=region, config=config)
        try:
            yield MotoDynamoDB(client, region, lock)
        finally:
            client.close()
