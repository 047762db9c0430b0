"""Values over the offload threshold live in S3 (moto); the engine never notices."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dynamodb_support import MotoEnvironment

from weft_serverless.errors import StorageIntegrityError
from weft_serverless.storage.base import Condition, Key, Put
from weft_serverless.storage.dynamodb import DEFAULT_OFFLOAD_THRESHOLD, DynamoDBStorage
from weft_serverless.storage.dynamodb_items import key_attributes, value_digest

K = Key("wf#1", "result")
BIG = bytes(range(256)) * 2000  # 512,000 bytes: over the inline limit, let alone the threshold


@pytest.fixture
def store(moto: MotoEnvironment, dynamodb_table: str, s3_bucket: str) -> Iterator[DynamoDBStorage]:
    yield DynamoDBStorage(
        dynamodb_table,
        client=moto.client(),
        s3_client=moto.client("s3"),
        offload_bucket=s3_bucket,
    )


def raw_item(store: DynamoDBStorage, key: Key) -> dict[str, object]:
    response = store.client.get_item(TableName=store.table_name, Key=key_attributes(key))
    return dict(response["Item"])


def test_large_value_round_trips_through_get_and_scan(store: DynamoDBStorage) -> None:
    store.batch([Put(K, BIG), Put(Key("wf#1", "small"), b"inline")])
    assert store.get(K) == BIG
    assert list(store.scan("wf#1")) == [("result", BIG), ("small", b"inline")]
    item = raw_item(store, K)
    assert set(item) == {"pk", "sk", "h", "s3"}
    assert item["h"] == {"B": value_digest(BIG)}
    name = f"weft-values/{value_digest(BIG).hex()}"
    assert item["s3"] == {"S": name}
    body = store.s3_client.get_object(Bucket=store.offload.bucket or "", Key=name)["Body"].read()
    assert body == BIG
    assert set(raw_item(store, Key("wf#1", "small"))) == {"pk", "sk", "v", "h"}


def test_threshold_decides_where_a_value_lives(store: DynamoDBStorage) -> None:
    at, over = b"a" * DEFAULT_OFFLOAD_THRESHOLD, b"o" * (DEFAULT_OFFLOAD_THRESHOLD + 1)
    store.batch([Put(Key("p", "at"), at), Put(Key("p", "over"), over)])
    assert "v" in raw_item(store, Key("p", "at"))
    assert "s3" in raw_item(store, Key("p", "over"))
    assert store.get(Key("p", "over")) == over


def test_conditions_compare_offloaded_values_by_digest(store: DynamoDBStorage) -> None:
    store.put(K, BIG)
    other = BIG[:-1] + b"\x00"
    assert not store.conditional_batch([Condition(K, other)], [Put(K, b"next")])
    assert not store.conditional_batch([Condition(K, None)], [Put(K, b"next")])
    assert store.conditional_batch([Condition(K, BIG)], [])
    assert store.conditional_batch([Condition(K, BIG)], [Put(K, other)])
    assert store.get(K) == other
    # Two keys, one offloaded condition, in one transaction.
    guard = Key("wf#1", "guard")
    assert store.conditional_batch([Condition(K, other)], [Put(guard, BIG)])
    assert store.get(guard) == BIG


def test_capabilities_grow_with_offload(store: DynamoDBStorage, moto: MotoEnvironment) -> None:
    assert store.capabilities().max_value_bytes == 64 * 1024 * 1024
    plain = DynamoDBStorage(store.table_name, client=moto.client())
    assert plain.capabilities().max_value_bytes == 380_000


def test_changed_object_is_detected_by_its_digest(store: DynamoDBStorage) -> None:
    store.put(K, BIG)
    name = f"weft-values/{value_digest(BIG).hex()}"
    store.s3_client.put_object(Bucket=store.offload.bucket or "", Key=name, Body=b"tampered")
    with pytest.raises(StorageIntegrityError, match="does not match its digest"):
        store.get(K)
    with pytest.raises(StorageIntegrityError):
        list(store.scan("wf#1"))


def test_missing_object_is_an_integrity_error(store: DynamoDBStorage) -> None:
    store.put(K, BIG)
    name = f"weft-values/{value_digest(BIG).hex()}"
    store.s3_client.delete_object(Bucket=store.offload.bucket or "", Key=name)
    with pytest.raises(StorageIntegrityError, match="missing"):
        store.get(K)


def test_offloaded_transfers_are_metered(store: DynamoDBStorage) -> None:
    before = store.meter.snapshot()
    store.put(K, BIG)
    store.get(K)
    step = store.meter.snapshot() - before
    assert step.by_operation["S3:PutObject"].requests == 1
    assert step.by_operation["S3:GetObject"].requests == 1
    # The DynamoDB item is only a pointer: one write unit and one read unit.
    assert step.by_operation["PutItem"].write_units == 1
    assert step.by_operation["GetItem"].read_units == 1


def test_hundred_values_just_under_the_threshold_fit_one_transaction(
    store: DynamoDBStorage,
) -> None:
    value = b"x" * DEFAULT_OFFLOAD_THRESHOLD
    store.batch([Put(Key("p" * 2048, f"{i:03d}" + "s" * 1021), value) for i in range(100)])
    assert sum(1 for _ in store.scan("p" * 2048)) == 100
