"""DynamoDB storage: one on-demand table, conditional writes, retries that never guess.

The item mapping lives in ``dynamodb_items``, the write path (transactions and settling
their outcome) in ``dynamodb_writes``, failure handling in ``dynamodb_faults``, the cost
meter in ``dynamodb_meter``, S3 offload in ``dynamodb_offload`` and client and table setup
in ``dynamodb_setup``; this module holds the configuration and the reads, and hands writes
on. boto3 is imported on first use only, so importing ``weft_serverless`` stays light. Why
each choice was made: ``docs/decisions/0003-dynamodb-mapping.md``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from weft_serverless.errors import ConfigurationError, StorageIntegrityError
from weft_serverless.storage import keys
from weft_serverless.storage.base import (
    Capabilities,
    ClockOffset,
    Condition,
    Key,
    Op,
    SortRange,
    Storage,
)
from weft_serverless.storage.dynamodb_clock import ClockEstimator
from weft_serverless.storage.dynamodb_faults import Retrier, TimeBudget
from weft_serverless.storage.dynamodb_items import key_attributes, key_condition
from weft_serverless.storage.dynamodb_meter import RequestMeter, item_size, read_units
from weft_serverless.storage.dynamodb_offload import Offload
from weft_serverless.storage.dynamodb_schema import (
    DIGEST_ATTRIBUTE,
    ENDPOINT_URL_ENV,
    OFFLOAD_ATTRIBUTE,
    OFFLOAD_BUCKET_ENV,
    SORT_ATTRIBUTE,
    TABLE_NAME_ENV,
    VALUE_ATTRIBUTE,
)
from weft_serverless.storage.dynamodb_setup import create_table, dynamodb_client, s3_client
from weft_serverless.storage.dynamodb_writes import BATCH_WRITE_CHUNK, Writes

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

    from weft_serverless.storage.dynamodb_items import Item

__all__ = ["DEFAULT_OFFLOAD_THRESHOLD", "MAX_INLINE_VALUE_BYTES", "DynamoDBStorage", "create_table"]

# Largest inline value: 380,000 bytes plus the longest keys and attribute names stays under
# both DynamoDB's 409,600-byte item limit and moto's stricter ~405,000-byte cutoff.
MAX_INLINE_VALUE_BYTES = 380_000
# Offloaded values above this go to S3. 100 items just under it stay below 4 MB in total,
# so with offload on, no atomic batch can hit the transaction size limit.
DEFAULT_OFFLOAD_THRESHOLD = 32 * 1024
DEFAULT_OFFLOAD_MAX_VALUE_BYTES = 64 * 1024 * 1024
MAX_ACTIONS = 100


class DynamoDBStorage(Storage):
    """The storage contract on one DynamoDB table (``pk``/``sk`` strings, ``v``/``h`` binary).

    Args:
        table_name: An existing table shaped by ``table_spec`` (see ``create_table``).
        client: A ready DynamoDB client; built on first use when omitted.
        region: Region for built clients; otherwise the usual AWS environment applies.
        endpoint_url: DynamoDB endpoint for built clients (moto's server, DynamoDB Local).
        offload_bucket: S3 bucket for values over ``offload_threshold``; off when ``None``.
        s3_client: A ready S3 client for offload; built on first use when omitted.
        offload_threshold: Values longer than this many bytes go to S3 (32 KiB: 100 items
            under it always fit one 4 MB transaction).
        offload_prefix: S3 key prefix of offloaded values (add a lifecycle rule on it).
        offload_max_value_bytes: ``max_value_bytes`` when offload is on.
        time_budget: Seconds per operation, or a callable returning the seconds left (set it
            from the Lambda context); past it a ``StorageRetriesExhaustedError`` is raised.
        sleep: Backoff sleep; with ``clock`` and ``rng``, injectable so tests never wait.
        connect_timeout: Seconds to connect, for built clients.
        read_timeout: Seconds to wait for an answer, for built clients.

    Attributes:
        meter: Requests and request units so far (``meter.snapshot()``, ``meter.reset()``).
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        offload_bucket: str | None = None,
        s3_client: S3Client | None = None,
        offload_threshold: int = DEFAULT_OFFLOAD_THRESHOLD,
        offload_prefix: str = "weft-values/",
        offload_max_value_bytes: int = DEFAULT_OFFLOAD_MAX_VALUE_BYTES,
        time_budget: TimeBudget = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        connect_timeout: float = 2.0,
        read_timeout: float = 5.0,
    ) -> None:
        super().__init__()
        self.table_name = table_name
        self._client = client
        self._s3 = s3_client
        self._owns_clients = client is None, s3_client is None
        self._region = region
        self._endpoint_url = endpoint_url
        self._timeouts = connect_timeout, read_timeout
        self._client_lock = threading.Lock()
        self.meter = RequestMeter()
        self.store_clock = ClockEstimator()
        self._retrier = Retrier(
            self.meter,
            time_budget=time_budget,
            sleep=sleep,
            clock=clock,
            rng=rng,
            observe=self.store_clock.observe,
        )
        self.offload = Offload(
            offload_bucket,
            prefix=offload_prefix,
            threshold=offload_threshold,
            client=lambda: self.s3_client,
            retrier=self._retrier,
        )
        self._writes = Writes(
            table_name,
            client=lambda: self.client,
            retrier=self._retrier,
            offload=self.offload,
            get_item=self._get_item,
        )
        self._capabilities = Capabilities(
            max_batch_ops=MAX_ACTIONS,
            max_value_bytes=offload_max_value_bytes if offload_bucket else MAX_INLINE_VALUE_BYTES,
            max_partition_bytes=2048,
            max_sort_bytes=1024,
            conditional_batch=True,
            atomic_batch=True,
            persistence="remote",
            concurrent_requests=True,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> DynamoDBStorage:
        """Configure from ``WEFT_TABLE_NAME``, ``WEFT_DYNAMODB_ENDPOINT``, ``WEFT_OFFLOAD_BUCKET``.

        The region and credentials come from the usual AWS variables (``AWS_REGION``, ...);
        ``options`` pass through to the constructor and win over the environment.
        """
        env = os.environ if environ is None else environ
        table = env.get(TABLE_NAME_ENV)
        if not table:
            raise ConfigurationError(f"set {TABLE_NAME_ENV} to the DynamoDB table name")
        options.setdefault("endpoint_url", env.get(ENDPOINT_URL_ENV) or None)
        options.setdefault("offload_bucket", env.get(OFFLOAD_BUCKET_ENV) or None)
        return cls(table, **options)

    # -- configuration ---------------------------------------------------------------------

    @property
    def time_budget(self) -> TimeBudget:
        return self._retrier.time_budget

    @time_budget.setter
    def time_budget(self, budget: TimeBudget) -> None:
        self._retrier.time_budget = budget

    @property
    def client(self) -> DynamoDBClient:
        """The DynamoDB client, built on first use with short timeouts and no SDK retries."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = dynamodb_client(self._region, self._endpoint_url, self._timeouts)
        return self._client

    @property
    def s3_client(self) -> S3Client:
        """The S3 client for offloaded values, built on first use."""
        if self._s3 is None:
            with self._client_lock:
                if self._s3 is None:
                    self._s3 = s3_client(self._region, self._timeouts)
        return self._s3

    def capabilities(self) -> Capabilities:
        return self._capabilities

    def close(self) -> None:
        for owned, client in zip(self._owns_clients, (self._client, self._s3), strict=True):
            if owned and client is not None:
                client.close()
        self._client = self._s3 = None

    def clock_offset(self) -> ClockOffset | None:
        """The table's clock against ours, from the ``Date`` header of recent answers.

        Every answer is read for it; only when none came lately is one item read for it.
        """
        offset = self.store_clock.offset()
        if offset is None:
            self._get_item(keys.meta_key(keys.CLOCK_PROBE))
            offset = self.store_clock.offset()
        return offset

    def create_table(self) -> None:
        """Create this storage's table if missing (see the module function)."""
        create_table(self.client, self.table_name)

    # -- reads ---------------------------------------------------------------------------------

    def _get(self, key: Key) -> bytes | None:
        item = self._get_item(key)
        return None if item is None else self._value(item)

    def _get_item(self, key: Key) -> Item | None:
        response = self._retrier.call(
            "GetItem",
            lambda: self.client.get_item(
                TableName=self.table_name, Key=key_attributes(key), ConsistentRead=True
            ),
        )
        item = response.get("Item")
        size = item_size(item) if item else 0
        self.meter.record("GetItem", read_units=read_units(size), bytes_read=size)
        return item

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        condition = key_condition(partition, rng)
        if condition is None:
            return
        params: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition.expression,
            "ExpressionAttributeValues": condition.values,
            "ConsistentRead": True,
            "ScanIndexForward": not reverse,
        }
        remaining = limit
        while True:
            if remaining is not None:
                params["Limit"] = remaining + condition.edges
            page = self._retrier.call("Query", lambda: self.client.query(**params))
            items = page.get("Items", [])
            size = sum(item_size(item) for item in items)
            self.meter.record("Query", read_units=read_units(size), bytes_read=size)
            for item in items:
                sort = item[SORT_ATTRIBUTE]["S"]
                if not rng.contains(sort):
                    continue
                yield sort, self._value(item)
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            if "LastEvaluatedKey" not in page:
                return
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _value(self, item: Item) -> bytes:
        if OFFLOAD_ATTRIBUTE in item:
            return self.offload.fetch(item[OFFLOAD_ATTRIBUTE]["S"], item[DIGEST_ATTRIBUTE]["B"])
        if VALUE_ATTRIBUTE not in item:
            where = item.get(SORT_ATTRIBUTE, {}).get("S")
            raise StorageIntegrityError(f"item {where!r} has no value and no S3 pointer")
        return bytes(item[VALUE_ATTRIBUTE]["B"])

    # -- writes --------------------------------------------------------------------------------

    def _batch(self, ops: Sequence[Op]) -> None:
        self._writes.batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        return self._writes.conditional_batch(conditions, ops)

    def _delete_many(self, keys: list[Key]) -> None:
        """Delete keys 25 at a time with ``BatchWriteItem``: NOT atomic, retried to the end.

        Offloaded S3 objects are left in place (other items may share them); expire them with
        a bucket lifecycle rule.
        """
        for start in range(0, len(keys), BATCH_WRITE_CHUNK):
            chunk = keys[start : start + BATCH_WRITE_CHUNK]
            self._writes.delete_chunk(chunk)
            with self.stats._lock:
                self.stats.batches += 1
                self.stats.items_deleted += len(chunk)
