"""Handles racing compare-and-swap on one item lose no update (moto is serialised, see support)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from dynamodb_support import MotoEnvironment, new_table

from weft_serverless.storage.base import Condition, Key, Put
from weft_serverless.storage.dynamodb import DynamoDBStorage

COUNTER = Key("wf#race", "counter")
WORKERS, INCREMENTS = 4, 15


@pytest.mark.parametrize("http", [False, True], ids=["in-process", "http"])
def test_racing_increments_are_never_lost(moto: MotoEnvironment, http: bool) -> None:
    if http:
        moto.start_server()
    table = new_table(moto.client(http=http))
    # Each worker has its own client: separate connections, as separate Lambdas would have.
    handles = [
        DynamoDBStorage(table, client=moto.client(http=http, fresh=True)) for _ in range(WORKERS)
    ]
    handles[0].put(COUNTER, b"0")

    def work(store: DynamoDBStorage) -> None:
        for _ in range(INCREMENTS):
            while True:
                current = store.get(COUNTER)
                assert current is not None
                new = str(int(current) + 1).encode()
                log = Put(Key("wf#race", f"log:{int(new):04d}"), current)
                if store.conditional_batch([Condition(COUNTER, current)], [Put(COUNTER, new), log]):
                    break

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(work, handles))
    total = WORKERS * INCREMENTS
    assert handles[0].get(COUNTER) == str(total).encode()
    # Every increment wrote exactly one log entry holding the value it replaced.
    log = list(handles[0].scan("wf#race", "log:"))
    assert [int(value) for _, value in log] == list(range(total))
    for store in handles:
        store.client.close()
    moto.client(http=http).delete_table(TableName=table)
