"""``TransactWriteItems`` on the locked moto server that ``weft dev`` runs: all or nothing, at
a cost that does not depend on the table.

moto itself deep-copies every table a transaction names, once per action, to roll back:
``weft dev`` grew by about 4.5 MB per start of a 200 KB input, and each commit slowed as the
table grew. The server runs moto as the tests' in-process moto does (``serialise_moto``),
which rolls back from copies of the items a transaction names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from botocore.exceptions import ClientError
from dynamodb_support import MotoEnvironment, moto, moto_server, new_table

__all__ = ["moto", "moto_server"]  # fixtures from dynamodb_support


def _item(sort: str, value: bytes) -> dict[str, Any]:
    return {"pk": {"S": "p"}, "sk": {"S": sort}, "v": {"B": value}}


def _key(sort: str) -> dict[str, Any]:
    return {"pk": {"S": "p"}, "sk": {"S": sort}}


def _stored(client: Any, table: str) -> dict[str, bytes]:
    items = client.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "p"}},
        ConsistentRead=True,
    )["Items"]
    return {item["sk"]["S"]: bytes(item["v"]["B"]) for item in items}


@pytest.fixture
def table(moto: MotoEnvironment, moto_server: str) -> tuple[Any, str]:
    del moto_server
    client = moto.client(http=True)
    return client, new_table(client)


def test_a_failed_transaction_applies_nothing(table: tuple[Any, str]) -> None:
    """Its first actions pass and are applied by moto before the last one fails: each is
    put back (an item that existed, with its old value; one that did not, gone again)."""
    client, name = table
    client.put_item(TableName=name, Item=_item("kept", b"old"))
    client.put_item(TableName=name, Item=_item("blocker", b"x"))
    client.put_item(TableName=name, Item=_item("doomed", b"d"))
    before = _stored(client, name)
    with pytest.raises(ClientError) as refused:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": name, "Item": _item("kept", b"new")}},
                {"Put": {"TableName": name, "Item": _item("fresh", b"new")}},
                {
                    "Update": {
                        "TableName": name,
                        "Key": _key("blocker"),
                        "UpdateExpression": "SET v = :v",
                        "ExpressionAttributeValues": {":v": {"B": b"changed"}},
                    }
                },
                {"Delete": {"TableName": name, "Key": _key("doomed")}},
                {
                    "ConditionCheck": {
                        "TableName": name,
                        "Key": _key("absent"),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _stored(client, name) == before
    # and a transaction that passes applies every action
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": name, "Item": _item("fresh", b"new")}},
            {"Delete": {"TableName": name, "Key": _key("blocker")}},
        ]
    )
    assert _stored(client, name) == {"kept": b"old", "doomed": b"d", "fresh": b"new"}


COPIES_SCRIPT = """
import copy, json, os
os.environ.update(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="t", AWS_SECRET_ACCESS_KEY="t")
import boto3
from moto.dynamodb.models.table import Table
from weft_serverless.dev_moto import LockedMotoServer
from weft_serverless.storage.dynamodb import create_table

server = LockedMotoServer()  # as weft dev starts it: nothing else ran in this process
client = boto3.client("dynamodb", endpoint_url=server.start(), region_name="us-east-1")
create_table(client, "t")
copied = []
deepcopy = copy.deepcopy


def counting(value, memo=None):
    if isinstance(value, Table):
        copied.append(value.name)
    return deepcopy(value, memo)


copy.deepcopy = counting
put = [{"Put": {"TableName": "t", "Item": {"pk": {"S": "p"}, "sk": {"S": "a"}}}}]
client.transact_write_items(TransactItems=put + [{"Delete": {"TableName": "t", "Key": {
    "pk": {"S": "p"}, "sk": {"S": "b"}}}}])
print(json.dumps(copied))
"""


def test_the_dev_servers_transactions_copy_no_table() -> None:
    """``weft dev``'s moto server, started in a fresh process as ``weft dev`` starts it,
    commits a transaction without copying the table it names (moto copies it once per
    action: every commit then costs the whole table, in time and in memory)."""
    found = subprocess.run(
        [sys.executable, "-c", COPIES_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == []
