"""DynamoDB's hard limits, checked before anything is sent and named in typed errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dynamodb_support import FaultScript, MotoEnvironment

from weft_serverless.errors import InvalidKeyError, StorageLimitError
from weft_serverless.storage.base import Condition, Key, Op, Put
from weft_serverless.storage.dynamodb import MAX_INLINE_VALUE_BYTES, DynamoDBStorage
from weft_serverless.storage.dynamodb_items import Action, check_limits, inline_item
from weft_serverless.storage.dynamodb_meter import (
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_BYTES,
    item_size,
)

P = "p"


@pytest.fixture
def store(moto: MotoEnvironment, dynamodb_table: str) -> Iterator[DynamoDBStorage]:
    client = moto.client(fresh=True)
    yield DynamoDBStorage(dynamodb_table, client=client)
    client.close()


def sent(store: DynamoDBStorage) -> FaultScript:
    """Records every TransactWriteItems send without changing it."""
    return FaultScript(store.client, "TransactWriteItems", [])


@pytest.mark.parametrize("actions", [99, 100])
def test_transactions_of_99_and_100_actions_commit(store: DynamoDBStorage, actions: int) -> None:
    ops: list[Op] = [Put(Key(P, f"k{i:03d}"), b"v") for i in range(actions - 1)]
    assert store.conditional_batch([Condition(Key(P, "guard"), None)], ops)
    assert len(list(store.scan(P))) == actions - 1
    store.batch([Put(Key("q", f"k{i:03d}"), b"v") for i in range(actions)])
    assert len(list(store.scan("q"))) == actions


def test_101_actions_are_refused_before_sending(store: DynamoDBStorage) -> None:
    recorder = sent(store)
    ops: list[Op] = [Put(Key(P, f"k{i:03d}"), b"v") for i in range(101)]
    with pytest.raises(StorageLimitError) as info:
        store.batch(ops)
    assert (info.value.limit, info.value.actual, info.value.maximum) == (
        "atomic batch actions",
        101,
        100,
    )
    assert "by 1" in str(info.value)
    with pytest.raises(StorageLimitError):
        store.conditional_batch([Condition(Key(P, "guard"), None)], ops[:100])
    assert recorder.bodies == [] and list(store.scan(P)) == []


def test_value_at_the_inline_limit_is_stored_and_one_byte_more_is_refused(
    store: DynamoDBStorage,
) -> None:
    longest = Key("p" * 2048, "s" * 1024)
    value = (bytes(range(256)) * (MAX_INLINE_VALUE_BYTES // 256 + 1))[:MAX_INLINE_VALUE_BYTES]
    store.put(longest, value)
    assert store.get(longest) == value
    with pytest.raises(StorageLimitError) as info:
        store.put(Key(P, "big"), value + b"!")
    assert info.value.limit == "value size" and info.value.actual - info.value.maximum == 1
    assert store.get(Key(P, "big")) is None


def test_item_limit_is_400_kb_counting_names_and_values() -> None:
    key = Key(P, "k")
    overhead = 24  # "pk"+"p" 3, "sk"+"k" 3, "v" 1, "h" 1 + a 16-byte digest
    assert item_size(inline_item(key, b"", bytes(16))) == overhead
    exact = MAX_ITEM_BYTES - overhead
    at_limit = Action(key, "Put", item=inline_item(key, b"x" * exact, bytes(16)))
    assert at_limit.size == MAX_ITEM_BYTES
    check_limits([at_limit], transactional=False)
    over = Action(key, "Put", item=inline_item(key, b"x" * (exact + 1), bytes(16)))
    with pytest.raises(StorageLimitError) as info:
        check_limits([over], transactional=False)
    assert (info.value.limit, info.value.actual, info.value.maximum) == (
        "item size",
        409_601,
        409_600,
    )


def _sized_ops(total: int, count: int) -> list[Op]:
    """``count`` puts whose items add up to exactly ``total`` bytes.

    Each item carries 26 bytes besides its value: "pk"+"p", "sk"+"kNN", "v", "h" + digest.
    """
    payload = total - 26 * count
    sizes = [payload // count] * count
    sizes[-1] += payload - sum(sizes)
    ops: list[Op] = [Put(Key(P, f"k{i:02d}"), b"x" * size) for i, size in enumerate(sizes)]
    assert sum(26 + len(op.value) for op in ops if isinstance(op, Put)) == total
    return ops


def test_transaction_of_exactly_4_mb_commits(store: DynamoDBStorage) -> None:
    store.batch(_sized_ops(MAX_TRANSACTION_BYTES, 12))
    assert len(list(store.scan(P))) == 12


def test_transaction_over_4_mb_is_refused_before_sending(store: DynamoDBStorage) -> None:
    # moto accepts any aggregate size; real DynamoDB refuses over 4 MB, so the adapter must.
    recorder = sent(store)
    with pytest.raises(StorageLimitError) as info:
        store.batch(_sized_ops(MAX_TRANSACTION_BYTES + 1, 12))
    assert info.value.limit == "transaction size"
    assert (info.value.actual, info.value.maximum) == (MAX_TRANSACTION_BYTES + 1, 4_194_304)
    assert "by 1" in str(info.value) and "offload_bucket" in str(info.value)
    assert recorder.bodies == [] and list(store.scan(P)) == []


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        (Key("p" * 2048, "s"), True),
        (Key("p" * 2049, "s"), False),
        (Key("p", "s" * 1024), True),
        (Key("p", "s" * 1025), False),
    ],
)
def test_key_lengths_follow_dynamodb(store: DynamoDBStorage, key: Key, ok: bool) -> None:
    if ok:
        store.put(key, b"v")
        assert store.get(key) == b"v"
        return
    with pytest.raises(InvalidKeyError, match="over this backend's"):
        store.put(key, b"v")
    with pytest.raises(InvalidKeyError):
        store.delete_many([key])
