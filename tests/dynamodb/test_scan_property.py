"""Scans on DynamoDB agree with the in-memory reference for any prefix, bounds, limit, order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dynamodb_support import MotoEnvironment, moto_environment, new_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft_serverless.storage.base import Key, Put, Storage
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.storage.memory import MemoryStorage

P = "p"
ALPHABET = "ab:~\x7f"
SORTS = sorted({"a", "a:", "a:a", "a:b", "ab", "b", "b:a", "b~", "b\x7f", "b\x7fa", "~", "\x7f"})
bound = st.none() | st.text(ALPHABET, min_size=1, max_size=3)


@pytest.fixture(scope="module")
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[Storage, Storage]]:
    env: MotoEnvironment = moto_environment(request.config)
    client = env.client()
    table = new_table(client)
    dynamo, memory = DynamoDBStorage(table, client=client), MemoryStorage()
    for store in (dynamo, memory):
        store.batch([Put(Key(P, sort), sort.encode()) for sort in SORTS])
    yield dynamo, memory
    client.delete_table(TableName=table)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    prefix=st.text(ALPHABET, max_size=2),
    gt=bound,
    gte=bound,
    lt=bound,
    lte=bound,
    limit=st.none() | st.integers(0, 4),
    reverse=st.booleans(),
)
def test_scan_matches_the_reference(
    stores: tuple[Storage, Storage],
    prefix: str,
    gt: str | None,
    gte: str | None,
    lt: str | None,
    lte: str | None,
    limit: int | None,
    reverse: bool,
) -> None:
    dynamo, memory = stores
    got, want = (
        list(store.scan(P, prefix, gt=gt, gte=gte, lt=lt, lte=lte, limit=limit, reverse=reverse))
        for store in (dynamo, memory)
    )
    assert got == want
