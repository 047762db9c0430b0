"""Request units by DynamoDB's published rules, with exact counts for known item sizes.

An item on key ``Key("p", "k")`` is 24 bytes plus its value: "pk"+"p" (3), "sk"+"k" (3),
"v" (1) and "h" with its 16-byte digest (17). Writes are billed per started KB, strongly
consistent reads per started 4 KB, transactional work twice.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dynamodb_support import MotoEnvironment

from weft_serverless.storage.base import Condition, Delete, Key, Put
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.storage.dynamodb_meter import (
    MeterSnapshot,
    OperationTotals,
    RequestMeter,
    attribute_size,
    item_size,
    read_units,
    write_units,
)

K = Key("p", "k")
OVERHEAD = 24


@pytest.fixture
def store(moto: MotoEnvironment, dynamodb_table: str) -> Iterator[DynamoDBStorage]:
    storage = DynamoDBStorage(dynamodb_table, client=moto.client())
    yield storage


def delta(store: DynamoDBStorage, before: MeterSnapshot) -> dict[str, OperationTotals]:
    return dict((store.meter.snapshot() - before).by_operation)


def test_item_size_counts_utf8_names_and_values() -> None:
    assert item_size({"pk": {"S": "p"}, "sk": {"S": "k"}}) == 6
    assert item_size({"é": {"S": "ü"}}) == 4
    assert item_size({"v": {"B": b"\x00" * 10}}) == 11
    assert attribute_size({"N": "12345"}) == 4
    assert attribute_size({"BOOL": True}) == attribute_size({"NULL": True}) == 1
    assert attribute_size({"L": [{"S": "ab"}]}) == 6
    assert attribute_size({"M": {"a": {"S": "b"}}}) == 6
    assert (write_units(0), write_units(1024), write_units(1025)) == (1, 1, 2)
    assert (read_units(0), read_units(4096), read_units(4097)) == (1, 1, 2)


@pytest.mark.parametrize(("value_bytes", "units"), [(1000, 1), (1001, 2), (2048 - 24, 2)])
def test_put_costs_one_unit_per_started_kb(
    store: DynamoDBStorage, value_bytes: int, units: int
) -> None:
    before = store.meter.snapshot()
    store.put(K, b"x" * value_bytes)
    assert delta(store, before) == {"PutItem": OperationTotals(1, 0, units)}
    assert (store.meter.snapshot() - before).bytes_written == OVERHEAD + value_bytes


@pytest.mark.parametrize(("value_bytes", "units"), [(4096 - 24, 1), (4097 - 24, 2), (None, 1)])
def test_consistent_get_costs_one_unit_per_started_4_kb(
    store: DynamoDBStorage, value_bytes: int | None, units: int
) -> None:
    if value_bytes is not None:
        store.put(K, b"x" * value_bytes)
    before = store.meter.snapshot()
    store.get(K)
    assert delta(store, before) == {"GetItem": OperationTotals(1, units, 0)}


def test_query_rounds_the_summed_page_size_up_to_4_kb(store: DynamoDBStorage) -> None:
    # Ten items of 25 + 400 bytes: 4,250 bytes in one page -> 2 units, not 10.
    store.batch([Put(Key("p", f"k{i}"), b"x" * 400) for i in range(10)])
    before = store.meter.snapshot()
    assert len(list(store.scan("p"))) == 10
    assert delta(store, before) == {"Query": OperationTotals(1, 2, 0)}


def test_transaction_costs_twice_per_item(store: DynamoDBStorage) -> None:
    before = store.meter.snapshot()
    store.batch([Put(Key("p", s), b"x" * 100) for s in ("a", "b", "c")])
    assert delta(store, before) == {"TransactWriteItems": OperationTotals(1, 0, 6)}


def test_step_commit_bills_the_fence_check_as_a_transactional_write(
    store: DynamoDBStorage,
) -> None:
    epoch = Key("p", "epoch")
    store.put(epoch, (1).to_bytes(8, "big"))
    before = store.meter.snapshot()
    ok = store.conditional_batch(
        [Condition(epoch, (1).to_bytes(8, "big")), Condition(Key("p", "op:1"), None)],
        [Put(Key("p", "op:1"), b"x" * 500), Put(Key("p", "head"), b"x" * 100)],
    )
    assert ok
    # Two 1 KB puts x2 = 4 write units; the epoch ConditionCheck (36 bytes) x2 = 2 more: a
    # transaction bills every item as a write, condition checks included.
    assert delta(store, before) == {"TransactWriteItems": OperationTotals(1, 0, 6)}


def test_single_item_conditional_write_is_half_price(store: DynamoDBStorage) -> None:
    store.put(K, b"holder-1")
    before = store.meter.snapshot()
    assert store.conditional_batch([Condition(K, b"holder-1")], [Put(K, b"holder-2")])
    assert delta(store, before) == {"PutItem": OperationTotals(1, 0, 1)}


def test_replacing_write_is_billed_by_the_larger_item(store: DynamoDBStorage) -> None:
    old = b"x" * 2500
    store.put(K, old)
    before = store.meter.snapshot()
    assert store.conditional_batch([Condition(K, old)], [Put(K, b"small")])
    assert delta(store, before) == {"PutItem": OperationTotals(1, 0, 3)}


def test_failed_conditional_writes_still_consume_units(store: DynamoDBStorage) -> None:
    store.put(K, b"x" * 2500)
    before = store.meter.snapshot()
    assert not store.conditional_batch([Condition(K, b"stale")], [Put(K, b"new")])
    assert delta(store, before) == {"PutItem": OperationTotals(1, 0, 3)}
    absent = Key("p", "absent")
    before = store.meter.snapshot()
    assert not store.conditional_batch([Condition(absent, b"stale")], [Put(absent, b"new")])
    assert delta(store, before) == {"PutItem": OperationTotals(1, 0, 1)}
    before = store.meter.snapshot()
    assert not store.conditional_batch([Condition(K, None)], [Put(K, b"a"), Put(absent, b"b")])
    assert delta(store, before) == {"TransactWriteItems": OperationTotals(1, 0, 4)}


def test_deletes_cost_the_deleted_item_when_known_else_one_unit(store: DynamoDBStorage) -> None:
    store.put(K, b"x" * 3000)
    before = store.meter.snapshot()
    assert store.conditional_batch([Condition(K, b"x" * 3000)], [Delete(K)])
    assert delta(store, before) == {"DeleteItem": OperationTotals(1, 0, 3)}
    before = store.meter.snapshot()
    store.delete(K)
    assert delta(store, before) == {"DeleteItem": OperationTotals(1, 0, 1)}


def test_bulk_delete_goes_25_per_request_one_unit_each(store: DynamoDBStorage) -> None:
    keys = [Key("p", f"k{i:02d}") for i in range(30)]
    before = store.meter.snapshot()
    assert store.delete_many(keys) == 30
    assert delta(store, before) == {"BatchWriteItem": OperationTotals(2, 0, 30)}


def test_a_lone_condition_is_one_consistent_read(store: DynamoDBStorage) -> None:
    store.put(K, b"v")
    before = store.meter.snapshot()
    assert store.conditional_batch([Condition(K, b"v")], [])
    assert delta(store, before) == {"GetItem": OperationTotals(1, 1, 0)}


def test_snapshots_subtract_reset_and_price() -> None:
    meter = RequestMeter()
    meter.record("PutItem", write_units=2, bytes_written=100)
    start = meter.snapshot()
    meter.record("GetItem", read_units=3, bytes_read=50)
    meter.record_retry("GetItem")
    step = meter.snapshot() - start
    assert step.by_operation == {"GetItem": OperationTotals(2, 3, 0)}
    assert (step.requests, step.read_units, step.write_units, step.retries) == (2, 3, 0, 1)
    assert meter.requests == 3 and meter.write_units == 2
    assert meter.snapshot().dollars() == pytest.approx(2 * 0.625e-6 + 3 * 0.125e-6)
    meter.reset()
    assert meter.snapshot() == MeterSnapshot()
