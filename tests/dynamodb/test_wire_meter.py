"""The wire meter (``bench/wire_meter.py``) bills as DynamoDB's published rules say, and the
adapter's own meter agrees with it on a transaction.

Item sizes are worked out by hand: an item ``pk="p"``, ``sk="k"``, ``v=<n bytes>`` is
"pk"+"p" (3) + "sk"+"k" (3) + "v" (1) + n = n + 7 bytes. Writes are billed per started KB,
strongly consistent reads per started 4 KB (half for an eventual read), a transaction twice
per item, condition checks included.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from dynamodb_support import MotoEnvironment

from weft_serverless.storage.base import Condition, Key, Put
from weft_serverless.storage.dynamodb import DynamoDBStorage

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wire_meter", BENCH / "wire_meter.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


wm = _load()
T = "t"


def item(sort: str, value_bytes: int, partition: str = "p") -> dict[str, Any]:
    return {"pk": {"S": partition}, "sk": {"S": sort}, "v": {"B": b"x" * value_bytes}}


def key(sort: str, partition: str = "p") -> dict[str, Any]:
    return {"pk": {"S": partition}, "sk": {"S": sort}}


def units(request: Any) -> tuple[float, float]:
    return request.write_units, request.read_units


def test_item_size_counts_names_and_values_in_utf8() -> None:
    assert wm.item_size(item("k", 1000)) == 1007
    assert wm.item_size({"é": {"S": "ü"}}) == 4
    assert wm.attribute_size({"N": "12345"}) == 4
    assert wm.attribute_size({"M": {"a": {"S": "b"}}}) == 6


@pytest.mark.parametrize(("value_bytes", "wru"), [(1000, 1), (1017, 1), (1018, 2), (2041, 2)])
def test_a_put_costs_one_unit_per_started_kb(value_bytes: int, wru: int) -> None:
    # 1017 + 7 = 1024 bytes: one unit; 1018 + 7 = 1025: two.
    meter = wm.WireMeter()
    request = meter.bill("PutItem", {"TableName": T, "Item": item("k", value_bytes)}, {}, True)
    assert units(request) == (wru, 0)
    assert [(c.family, c.action) for c in request.charges] == [("p#", "Put")]


def test_a_replacing_write_and_a_delete_are_billed_by_the_stored_item() -> None:
    meter = wm.WireMeter()
    meter.bill("PutItem", {"TableName": T, "Item": item("k", 2500)}, {}, True)  # 2,507 B
    small = meter.bill("PutItem", {"TableName": T, "Item": item("k", 10)}, {}, True)
    assert units(small) == (3, 0)  # the 2,507-byte item it replaced
    meter.bill("PutItem", {"TableName": T, "Item": item("k", 3000)}, {}, True)
    assert units(meter.bill("DeleteItem", {"TableName": T, "Key": key("k")}, {}, True)) == (3, 0)
    assert units(meter.bill("DeleteItem", {"TableName": T, "Key": key("k")}, {}, True)) == (1, 0)


def test_a_refused_conditional_write_is_billed_too() -> None:
    meter = wm.WireMeter()
    refused = meter.bill("PutItem", {"TableName": T, "Item": item("k", 5000)}, {}, False)
    assert units(refused) == (1, 0)  # on an absent item: 1 unit, whatever it would have put
    assert meter.sizes == {}  # nothing was written
    meter.bill("PutItem", {"TableName": T, "Item": item("k", 2500)}, {}, True)
    refused = meter.bill("PutItem", {"TableName": T, "Item": item("k", 10)}, {}, False)
    assert units(refused) == (3, 0)


def test_a_transaction_bills_every_item_twice_condition_checks_included() -> None:
    meter = wm.WireMeter()
    meter.bill("PutItem", {"TableName": T, "Item": item("fence", 29)}, {}, True)  # 36 B
    meter.bill("PutItem", {"TableName": T, "Item": item("big", 1500)}, {}, True)  # 1,507 B
    transact = {
        "TransactItems": [
            {"Put": {"TableName": T, "Item": item("op", 500)}},  # 1 unit
            {"Put": {"TableName": T, "Item": item("head", 1100)}},  # 1,107 B: 2 units
            {"ConditionCheck": {"TableName": T, "Key": key("fence")}},  # 1 unit
            {"ConditionCheck": {"TableName": T, "Key": key("big")}},  # 2 units
            {"Delete": {"TableName": T, "Key": key("absent")}},  # 1 unit
        ]
    }
    request = meter.bill("TransactWriteItems", transact, {}, True)
    assert units(request) == (2 * (1 + 2 + 1 + 2 + 1), 0)
    actions = [(c.action, c.write_units) for c in request.charges]
    assert actions == [("Put", 2), ("Put", 4), ("ConditionCheck", 2), ("ConditionCheck", 4),
                       ("Delete", 2)]  # fmt: skip
    cancelled = meter.bill("TransactWriteItems", transact, {}, False)
    assert units(cancelled) == units(request)  # billed as if it had committed


@pytest.mark.parametrize(
    ("value_bytes", "consistent", "rru"),
    [(4089, True, 1), (4090, True, 2), (4090, False, 1), (None, True, 1), (None, False, 0.5)],
)
def test_a_get_costs_one_unit_per_started_4_kb(
    value_bytes: int | None, consistent: bool, rru: float
) -> None:
    meter = wm.WireMeter()
    found = {} if value_bytes is None else {"Item": item("k", value_bytes)}
    params = {"TableName": T, "Key": key("k"), "ConsistentRead": consistent}
    assert units(meter.bill("GetItem", params, found, True)) == (0, rru)


def test_a_query_rounds_the_summed_size_of_what_it_returns() -> None:
    # Ten items of 425 + 8 bytes ("k0".."k9"): 4,330 bytes in one page -> 2 units, not 10.
    meter = wm.WireMeter()
    items = [item(f"k{i}", 425) for i in range(10)]
    params = {"TableName": T, "ConsistentRead": True,
              "ExpressionAttributeValues": {":pk": {"S": "p"}}}  # fmt: skip
    assert units(meter.bill("Query", params, {"Items": items}, True)) == (0, 2)
    assert units(meter.bill("Query", params, {"Items": []}, True)) == (0, 1)


def test_transact_gets_and_batch_writes_bill_each_item() -> None:
    meter = wm.WireMeter()
    gets = {"TransactItems": [{"Get": {"TableName": T, "Key": key(s)}} for s in ("a", "b")]}
    answer = {"Responses": [{"Item": item("a", 100)}, {}]}
    assert units(meter.bill("TransactGetItems", gets, answer, True)) == (0, 4)
    deletes = [{"DeleteRequest": {"Key": key(s)}} for s in ("a", "b", "c")]
    left = {"UnprocessedItems": {T: [deletes[2]]}}
    batch = meter.bill("BatchWriteItem", {"RequestItems": {T: deletes}}, left, True)
    assert units(batch) == (2, 0)  # the unprocessed one is billed when it is sent again
    assert meter.bill("DescribeTable", {"TableName": T}, {}, True) is None
    assert meter.control == ["DescribeTable"]


def test_key_families_drop_run_ids_and_shards() -> None:
    assert wm.key_family("wf#abc", "op#00000003") == "op#"
    assert wm.key_family("wf#abc", "owner#epoch") == "owner#epoch"
    assert wm.key_family("wf#abc", "state") == "state"
    assert wm.key_family("claims#02", "x") == "claims#"
    assert wm.key_family("status#running#01", "x") == "status#running#"
    assert wm.key_family("meta", "lease#epoch") == "meta:lease#epoch"


def test_the_hook_bills_what_the_client_sends(moto: MotoEnvironment, dynamodb_table: str) -> None:
    client = moto.client(fresh=True)
    meter = wm.WireMeter()
    meter.attach(client)
    try:
        client.put_item(TableName=dynamodb_table, Item=item("k", 2000))
        client.get_item(TableName=dynamodb_table, Key=key("k"), ConsistentRead=True)
    finally:
        meter.detach(client)
    client.get_item(TableName=dynamodb_table, Key=key("k"))
    assert [(r.operation, r.ok, units(r)) for r in meter.requests] == [
        ("PutItem", True, (2, 0)),
        ("GetItem", True, (0, 1)),
    ]


def test_the_adapter_meter_bills_a_fenced_transaction_as_the_wire_does(
    moto: MotoEnvironment, dynamodb_table: str
) -> None:
    """A step commit with a fence ``ConditionCheck``: both meters, one figure."""
    client = moto.client(fresh=True)
    meter = wm.WireMeter()
    meter.attach(client)
    store = DynamoDBStorage(dynamodb_table, client=client)
    epoch = Key("wf#r", "owner#epoch")
    store.put(epoch, (1).to_bytes(8, "big"))
    mark, before = meter.mark(), store.meter.snapshot()
    assert store.conditional_batch(
        [Condition(epoch, (1).to_bytes(8, "big")), Condition(Key("wf#r", "op#1"), None)],
        [Put(Key("wf#r", "op#1"), b"x" * 1500), Put(Key("wf#r", "owner#head"), b"x" * 100)],
    )
    wire, adapter = meter.since(mark), store.meter.snapshot() - before
    # op#1 of 1.5 KB (2 units), the head (1), the epoch's check (1): all twice.
    assert (wire.requests, wire.write_units, wire.read_units) == (1, 8, 0)
    assert (adapter.requests, adapter.write_units, adapter.read_units) == (1, 8, 0)
