"""``weft_serverless.testing.moto_dynamodb``: in-process moto that the engine's threads can share.

moto's models hold no lock, and an engine runs requests on more than one thread (the
invocation heartbeat renews claims while the caller commits). Unserialised, that corrupted
moto (``RuntimeError: dictionary changed size during iteration`` in the maintenance benchmark)
or let two conditional writes both pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import Engine, workflow
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage.base import Condition, Key, Put
from weft_serverless.testing import MotoDynamoDB, VirtualClock, moto_dynamodb

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def moto() -> Generator[MotoDynamoDB, None, None]:
    with moto_dynamodb() as mock:
        yield mock


def test_every_request_into_moto_holds_the_lock(
    moto: MotoDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests from any thread reach moto's backend with the helper's lock held."""
    from moto.dynamodb.models import DynamoDBBackend

    held: list[bool] = []
    original = DynamoDBBackend.get_item

    def probe(self: Any, *args: Any, **kwargs: Any) -> Any:
        held.append(moto.lock._is_owned())  # type: ignore[attr-defined]
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DynamoDBBackend, "get_item", probe)
    storage = moto.storage()
    reader = threading.Thread(target=lambda: storage.get(Key("wf#x", "state")))
    reader.start()
    reader.join(30)
    storage.get(Key("wf#x", "state"))
    assert held == [True, True]


def test_racing_compare_and_swap_loses_no_update(moto: MotoDynamoDB) -> None:
    """Threads incrementing one item by compare-and-swap: every accepted swap counts once."""
    storage = moto.storage()
    key = Key("wf#counter", "value")
    storage.put(key, b"0")
    accepted: list[int] = []

    def increment(times: int) -> None:
        done = 0
        while done < times:
            current = storage.get(key)
            assert current is not None
            new = str(int(current) + 1).encode()
            if storage.conditional_batch([Condition(key, current)], [Put(key, new)]):
                done += 1
        accepted.append(done)

    threads = [threading.Thread(target=increment, args=(25,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sum(accepted) == 100
    assert storage.get(key) == b"100"


def test_a_cancelled_transaction_applies_nothing_on_a_large_table(moto: MotoDynamoDB) -> None:
    """Cancelled transactions roll back from copies of the items they name (not of the whole
    table): a put, an overwrite, an update and a delete next to a failing check all undone."""
    storage = moto.storage()
    storage.batch([Put(Key(f"wf#{n}", "state"), b"v%d" % n) for n in range(100)])
    client, table = moto.client, storage.table_name

    def item(pk: str, sk: str, value: bytes) -> dict[str, Any]:
        return {"pk": {"S": pk}, "sk": {"S": sk}, "v": {"B": value}}

    before = {n: storage.get(Key(f"wf#{n}", "state")) for n in range(4)}
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": item("wf#new", "state", b"x")}},
                {"Put": {"TableName": table, "Item": item("wf#0", "state", b"changed")}},
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": "wf#1"}, "sk": {"S": "state"}},
                        "UpdateExpression": "SET v = :v",
                        "ExpressionAttributeValues": {":v": {"B": b"updated"}},
                    }
                },
                {
                    "Delete": {
                        "TableName": table,
                        "Key": {"pk": {"S": "wf#2"}, "sk": {"S": "state"}},
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": "wf#3"}, "sk": {"S": "state"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert storage.get(Key("wf#new", "state")) is None
    assert {n: storage.get(Key(f"wf#{n}", "state")) for n in range(4)} == before
    assert len(list(storage.scan("wf#0"))) == 1


def test_a_heartbeat_renewing_while_workflows_start_loses_no_claim(moto: MotoDynamoDB) -> None:
    """The benchmark's failure: workflows started inside ``engine.invocation()`` while its
    heartbeat renews every claim on its own thread (every 10 ms). Starts go on until the
    heartbeat has renewed at least three times during them (however fast or loaded the
    machine), at least 30 and at most 300. No claim is lost and every run parks."""

    def nap(ctx: Any, _: Any) -> Generator[Any, Any, str]:
        yield ctx.sleep("1h")
        return "woke"

    engine = Engine.create(
        moto.storage(),
        {"nap": workflow("nap").execute(nap)},
        ownership="workflow-lease",
        background_tasks="manual",
        clock=VirtualClock(),
        workflow_claim_ttl=0.05,
        workflow_claim_renew_interval=0.01,
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        counters = engine.runtime.metrics.counters
        with engine.invocation():
            before = counters.get("heartbeat_renewals", 0)
            started = 0
            while started < 30 or (
                counters.get("heartbeat_renewals", 0) - before < 3 and started < 300
            ):
                engine.start("nap", id=f"nap-{started}")
                started += 1
            renewals = counters.get("heartbeat_renewals", 0) - before
    assert [str(w.message) for w in seen if issubclass(w.category, WorkflowClaimLost)] == []
    assert counters.get("claim_renewal_failures", 0) == 0
    assert {engine.describe(f"nap-{n}").status for n in range(started)} == {"running"}
    assert renewals >= 3  # the heartbeat renewed while the starts went on
    engine.close()


def test_weft_serverless_testing_imports_without_moto_or_boto3() -> None:
    """moto stays optional: the testing module imports without it, and the helper says what
    to install instead of failing on an import."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["moto"] = None  # import moto -> ImportError
        sys.modules["boto3"] = None
        import weft_serverless.testing as testing
        from weft_serverless.errors import ConfigurationError
        try:
            with testing.moto_dynamodb():
                pass
        except ConfigurationError as exc:
            print(type(exc).__name__, "weft-serverless[local]" in str(exc))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ConfigurationError", "True"]
