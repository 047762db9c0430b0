"""The item, condition, token and key-range mapping, plus configuration and table setup."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from dynamodb_support import FaultScript, MotoEnvironment, new_table

from weft_serverless.errors import ConfigurationError
from weft_serverless.storage.base import Condition, Key, Put, sort_range
from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table
from weft_serverless.storage.dynamodb_faults import cancellation_reasons, classify
from weft_serverless.storage.dynamodb_items import (
    Action,
    commit_token,
    condition_expression,
    key_condition,
    value_digest,
)

P = "p"


@pytest.fixture
def store(moto: MotoEnvironment, dynamodb_table: str) -> Iterator[DynamoDBStorage]:
    client = moto.client(fresh=True)
    yield DynamoDBStorage(dynamodb_table, client=client)
    client.close()


def expression(prefix: str = "", **bounds: str) -> str | None:
    rng = sort_range(
        prefix, bounds.get("gt"), bounds.get("gte"), bounds.get("lt"), bounds.get("lte")
    )
    condition = key_condition(P, rng)
    return None if condition is None else f"{condition.expression} [{condition.edges}]"


def test_key_conditions_use_the_tightest_form() -> None:
    assert expression() == "pk = :pk [0]"
    assert expression("wf:") == "pk = :pk AND begins_with(sk, :lo) [0]"
    assert expression(gt="a") == "pk = :pk AND sk > :lo [0]"
    assert expression(gte="a") == "pk = :pk AND sk >= :lo [0]"
    assert expression(lt="b") == "pk = :pk AND sk < :hi [0]"
    assert expression(lte="b") == "pk = :pk AND sk <= :hi [0]"
    assert expression(gte="a", lte="b") == "pk = :pk AND sk BETWEEN :lo AND :hi [0]"
    assert expression(gt="a", lte="b") == "pk = :pk AND sk BETWEEN :lo AND :hi [1]"
    assert expression(gt="a", lt="b") == "pk = :pk AND sk BETWEEN :lo AND :hi [2]"
    assert expression("wf:", gt="wf:5") == "pk = :pk AND sk BETWEEN :lo AND :hi [2]"
    assert expression("\x7f") == "pk = :pk AND sk >= :lo [0]"  # no string follows the prefix
    assert expression(gt="b", lt="a") is None
    assert expression(gte="b", lt="b") is None


def test_scan_sends_padded_limits_and_filters_strict_edges(store: DynamoDBStorage) -> None:
    store.batch([Put(Key(P, f"k{i}"), b"v") for i in range(6)])
    sent = FaultScript(store.client, "Query", [])
    pairs = list(store.scan(P, gt="k1", lt="k4", limit=2))
    assert [sort for sort, _ in pairs] == ["k2", "k3"]
    assert sent.bodies[0]["Limit"] == 4 and sent.bodies[0]["ConsistentRead"] is True
    assert list(store.scan(P, gt="k1", lt="k4", reverse=True)) == [("k3", b"v"), ("k2", b"v")]
    assert sent.bodies[-1]["ScanIndexForward"] is False
    assert list(store.scan(P, gt="k3", lt="k3")) == []
    assert len(sent.bodies) == 2  # an empty range sends nothing


def test_scan_follows_one_megabyte_pages_lazily(store: DynamoDBStorage) -> None:
    big = b"x" * 300_000
    for i in range(7):
        store.put(Key(P, f"k{i}"), big)
    sent = FaultScript(store.client, "Query", [])
    pairs = store.scan(P)
    assert next(pairs)[0] == "k0" and len(sent.bodies) == 1
    assert [sort for sort, _ in pairs] == [f"k{i}" for i in range(1, 7)]
    assert len(sent.bodies) > 1 and "ExclusiveStartKey" in sent.bodies[1]
    assert [s for s, _ in store.scan(P, reverse=True, limit=5)] == ["k6", "k5", "k4", "k3", "k2"]


def test_conditions_compare_digests_and_absence() -> None:
    assert condition_expression(None) == ("attribute_not_exists(pk)", {})
    assert condition_expression(b"") == ("h = :h", {":h": {"B": value_digest(b"")}})
    assert value_digest(b"") != value_digest(b"\x00") and len(value_digest(b"x")) == 16


def test_commit_token_is_deterministic_and_request_specific() -> None:
    def put(sort: str, value: bytes, expected: bytes | None = None, cond: bool = False) -> Action:
        return Action(Key(P, sort), "Put", cond, expected, None, value_digest(value))

    one = [put("a", b"1", None, True), put("b", b"2")]
    token = commit_token("t", one)
    assert len(token) == 36 and token == commit_token("t", list(reversed(one)))
    assert token != commit_token("t2", one)
    assert token != commit_token("t", [put("a", b"1"), put("b", b"2")])  # no condition
    assert token != commit_token("t", [put("a", b"1", b"x", True), put("b", b"2")])
    assert token != commit_token("t", [put("a", b"1", None, True), put("b", b"3")])


def test_cancellation_reasons_come_from_the_list_or_the_message() -> None:
    listed = {"CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}]}
    assert cancellation_reasons(listed) == ["None", "TransactionConflict"]
    message = {"Error": {"Message": "Transaction cancelled ... [ConditionalCheckFailed, None]"}}
    assert cancellation_reasons(message) == ["ConditionalCheckFailed", "None"]


def test_non_botocore_exceptions_are_not_classified() -> None:
    assert classify(ValueError("bug"), "PutItem") is None


def test_import_and_construction_never_load_boto3() -> None:
    code = (
        "import sys, weft_serverless, weft_serverless.storage\n"
        "from weft_serverless.storage.dynamodb import DynamoDBStorage\n"
        "store = DynamoDBStorage('t', offload_bucket='b')\n"
        "store.capabilities()\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules, 'loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_built_client_has_short_timeouts_and_no_sdk_retries(moto: MotoEnvironment) -> None:
    store = DynamoDBStorage("t", region="eu-west-1", read_timeout=3.0)
    config: Any = store.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.0, 3.0)
    assert config.retries["total_max_attempts"] == 1
    assert store.client.meta.region_name == "eu-west-1"
    store.close()
    assert store._client is None


def test_from_env_reads_the_weft_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"WEFT_TABLE_NAME": "orders", "WEFT_DYNAMODB_ENDPOINT": "http://127.0.0.1:1"}
    env["WEFT_OFFLOAD_BUCKET"] = "blobs"
    store = DynamoDBStorage.from_env(env, time_budget=3.0)
    assert store.table_name == "orders" and store.offload.bucket == "blobs"
    assert store._endpoint_url == "http://127.0.0.1:1" and store.time_budget == 3.0
    assert DynamoDBStorage.from_env({"WEFT_TABLE_NAME": "t"}).offload.bucket is None
    with pytest.raises(ConfigurationError, match="WEFT_TABLE_NAME"):
        DynamoDBStorage.from_env({})
    monkeypatch.setenv("WEFT_TABLE_NAME", "from-process")
    assert DynamoDBStorage.from_env().table_name == "from-process"


def test_create_table_follows_the_spec_and_is_idempotent(moto: MotoEnvironment) -> None:
    client = moto.client()
    name = new_table(client)
    create_table(client, name)  # again: no error
    table = client.describe_table(TableName=name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {
        "pk": "HASH",
        "sk": "RANGE",
    }
    ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}
    store = DynamoDBStorage(name, client=client)
    assert store.conditional_batch([Condition(Key(P, "a"), None)], [Put(Key(P, "a"), b"1")])
    client.delete_table(TableName=name)


def test_capabilities_are_honest() -> None:
    caps = DynamoDBStorage("t").capabilities()
    assert (caps.max_batch_ops, caps.max_value_bytes) == (100, 380_000)
    assert (caps.max_partition_bytes, caps.max_sort_bytes) == (2048, 1024)
    assert caps.conditional_batch and caps.atomic_batch and caps.persistence == "remote"
