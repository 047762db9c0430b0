"""Every failure of research/dynamodb.md section 5 that moto can stage, injected through botocore.

Each test shows what the contract needs: no lost write, no duplicate write, one
``ClientRequestToken`` reused on every retry of a commit, the right typed error, and no
botocore exception leaving the adapter. Backoff sleeps are recorded on a fake clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError
from dynamodb_support import (
    FakeClock,
    FaultScript,
    MotoEnvironment,
    applied_then,
    aws_error,
    cancelled,
    new_table,
    passes,
    raises,
    read_timeout,
    succeeded,
)

from weft_serverless.errors import (
    StorageRequestError,
    StorageRetriesExhaustedError,
    StorageUnavailableError,
)
from weft_serverless.storage.base import Condition, Delete, Key, Put
from weft_serverless.storage.dynamodb import DynamoDBStorage

P = "wf#1"
A, B, C = Key(P, "a"), Key(P, "b"), Key(P, "c")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _store(moto: MotoEnvironment, clock: FakeClock, *, http: bool = False) -> DynamoDBStorage:
    client = moto.client(http=http, fresh=True)
    table = new_table(client)
    return DynamoDBStorage(
        table, client=client, sleep=clock.sleep, clock=clock, rng=random.Random(7)
    )


@pytest.fixture
def store(moto: MotoEnvironment, clock: FakeClock) -> Iterator[DynamoDBStorage]:
    storage = _store(moto, clock)
    yield storage
    storage.client.delete_table(TableName=storage.table_name)
    storage.client.close()


@pytest.fixture(params=["in-process", "http"])
def any_store(
    request: pytest.FixtureRequest, moto: MotoEnvironment, clock: FakeClock
) -> Iterator[DynamoDBStorage]:
    if request.param == "http":
        moto.start_server()
    storage = _store(moto, clock, http=request.param == "http")
    yield storage
    storage.client.delete_table(TableName=storage.table_name)
    storage.client.close()


def script(store: DynamoDBStorage, operation: str, *steps: Any) -> FaultScript:
    return FaultScript(store.client, operation, list(steps))


def count(store: DynamoDBStorage, operation: str) -> int:
    totals = store.meter.snapshot().by_operation.get(operation)
    return 0 if totals is None else totals.requests


# -- 5.1 throttling ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"],
)
def test_throttled_put_is_retried_with_growing_jittered_backoff(
    store: DynamoDBStorage, clock: FakeClock, code: str
) -> None:
    faults = script(store, "PutItem", aws_error(code), aws_error(code), aws_error(code))
    store.put(A, b"v")
    assert store.get(A) == b"v"
    assert len(faults.bodies) == 4
    assert len(clock.sleeps) == 3
    # Exponential growth with jitter: each delay lies in [cap/2, cap], cap doubling from 50 ms.
    for attempt, delay in enumerate(clock.sleeps):
        cap = 0.05 * 2**attempt
        assert cap / 2 <= delay <= cap
    assert store.meter.snapshot().retries == 3


def test_throttling_inside_a_transaction_is_retried_with_the_same_token(
    store: DynamoDBStorage,
) -> None:
    faults = script(
        store,
        "TransactWriteItems",
        cancelled("ThrottlingError", "None"),
        cancelled("None", "ProvisionedThroughputExceeded"),
    )
    assert store.conditional_batch([Condition(A, None)], [Put(A, b"1"), Put(B, b"2")])
    assert len(faults.bodies) == 3
    assert len(set(faults.tokens)) == 1 and faults.tokens[0] is not None
    assert list(store.scan(P)) == [("a", b"1"), ("b", b"2")]


def test_throttled_scan_page_resumes_where_it_stopped(
    store: DynamoDBStorage, clock: FakeClock
) -> None:
    """30 items of 40 KB span two 1 MB Query pages; the second page is throttled once, backed
    off, and re-asked from the same ExclusiveStartKey."""
    for start in range(0, 30, 5):
        store.batch([Put(Key(P, f"k{i:02d}"), b"x" * 40_000) for i in range(start, start + 5)])
    faults = script(store, "Query", passes, aws_error("ThrottlingException"))
    pairs = store.scan(P, limit=None)
    first = [next(pairs)[0] for _ in range(3)]
    assert first == ["k00", "k01", "k02"]
    assert [sort for sort, _ in pairs] == [f"k{i:02d}" for i in range(3, 30)]
    assert len(faults.bodies) == 3 and len(clock.sleeps) == 1
    assert faults.bodies[2]["ExclusiveStartKey"] == faults.bodies[1]["ExclusiveStartKey"]


def test_unprocessed_items_of_a_bulk_delete_are_retried_until_done(
    store: DynamoDBStorage, clock: FakeClock
) -> None:
    keys = [Key(P, f"k{i:02d}") for i in range(30)]
    store.batch([Put(k, b"v") for k in keys[:25]])
    store.batch([Put(k, b"v") for k in keys[25:]])

    def nothing_processed(request: Any) -> Any:
        import json

        from dynamodb_support import aws_response

        return aws_response(
            request, 200, {"UnprocessedItems": json.loads(request.body)["RequestItems"]}
        )

    faults = script(store, "BatchWriteItem", nothing_processed)
    assert store.delete_many(keys) == 30
    assert list(store.scan(P)) == []
    assert len(faults.bodies) == 3  # 25 refused, 25 again, then the last 5
    assert len(clock.sleeps) == 1


# -- 5.2 transaction conflicts -----------------------------------------------------------------


def test_transaction_conflict_is_retried_with_the_same_token(
    store: DynamoDBStorage, clock: FakeClock
) -> None:
    store.put(A, b"epoch-1")
    conflict = cancelled("TransactionConflict", "None")
    faults = script(store, "TransactWriteItems", conflict, conflict)
    ok = store.conditional_batch([Condition(A, b"epoch-1")], [Put(B, b"step"), Put(C, b"idx")])
    assert ok is True
    assert len(faults.bodies) == 3 and len(set(faults.tokens)) == 1
    assert len(clock.sleeps) == 2
    assert list(store.scan(P)) == [("a", b"epoch-1"), ("b", b"step"), ("c", b"idx")]


def test_conflict_on_a_single_item_write_is_retried(store: DynamoDBStorage) -> None:
    script(store, "PutItem", aws_error("TransactionConflictException"))
    assert store.conditional_batch([Condition(A, None)], [Put(A, b"holder")])
    assert store.get(A) == b"holder"


def test_transaction_in_progress_waits_and_reuses_the_token(store: DynamoDBStorage) -> None:
    faults = script(store, "TransactWriteItems", aws_error("TransactionInProgressException"))
    store.batch([Put(A, b"1"), Put(B, b"2")])
    assert len(faults.bodies) == 2 and faults.tokens[0] == faults.tokens[1]
    assert list(store.scan(P)) == [("a", b"1"), ("b", b"2")]


# -- 5.3 / 5.4 server errors and ambiguous outcomes --------------------------------------------


def test_500_after_the_commit_landed_is_settled_by_reading_back(store: DynamoDBStorage) -> None:
    faults = script(
        store, "TransactWriteItems", applied_then(aws_error("InternalServerError", status=500))
    )
    ok = store.conditional_batch([Condition(A, None)], [Put(A, b"step-1"), Put(B, b"index")])
    # The retry met its own write (moto has no token memory), read back, and saw it landed.
    assert ok is True
    assert len(faults.bodies) == 2 and faults.tokens[0] == faults.tokens[1]
    assert count(store, "TransactGetItems") == 1
    assert list(store.scan(P)) == [("a", b"step-1"), ("b", b"index")]


def test_lost_response_after_commit_reports_success_on_both_modes(
    any_store: DynamoDBStorage,
) -> None:
    store = any_store
    store.put(C, b"gone-soon")
    faults = script(store, "TransactWriteItems", applied_then(read_timeout()))
    ok = store.conditional_batch(
        [Condition(A, None)], [Put(A, b"op-record"), Put(B, b"head"), Delete(C)]
    )
    assert ok is True
    assert len(faults.bodies) == 2 and len(set(faults.tokens)) == 1
    assert list(store.scan(P)) == [("a", b"op-record"), ("b", b"head")]


def test_connection_reset_after_commit_is_settled_too(store: DynamoDBStorage) -> None:
    faults = script(store, "TransactWriteItems", applied_then(raises(ConnectionClosedError)))
    assert store.conditional_batch([Condition(A, None)], [Put(A, b"1"), Put(B, b"2")])
    assert len(faults.bodies) == 2 and faults.tokens[0] == faults.tokens[1]


def test_replayed_token_answered_as_success_needs_no_read_back(store: DynamoDBStorage) -> None:
    # Real DynamoDB within 10 minutes: the replay of an applied token returns 200, no write.
    faults = script(store, "TransactWriteItems", applied_then(read_timeout()), succeeded())
    assert store.conditional_batch([Condition(A, None)], [Put(A, b"1"), Put(B, b"2")])
    assert len(faults.bodies) == 2 and faults.tokens[0] == faults.tokens[1]
    assert count(store, "TransactGetItems") == 0
    assert list(store.scan(P)) == [("a", b"1"), ("b", b"2")]


def test_lost_attempt_that_never_landed_then_lost_race_returns_false(
    store: DynamoDBStorage, moto: MotoEnvironment
) -> None:
    rival = moto.client()

    def lost_while_a_rival_commits(request: Any) -> Any:
        rival.put_item(
            TableName=store.table_name,
            Item={"pk": {"S": P}, "sk": {"S": "a"}, "v": {"B": b"rival"}, "h": {"B": b"x" * 16}},
        )
        return read_timeout()(request)

    faults = script(store, "TransactWriteItems", lost_while_a_rival_commits)
    ok = store.conditional_batch([Condition(A, None)], [Put(A, b"mine"), Put(B, b"mine")])
    # The read-back shows the rival's bytes, not ours: the failure is real, nothing of ours landed.
    assert ok is False
    assert len(faults.bodies) == 2 and count(store, "TransactGetItems") == 1
    assert store.get(A) == b"rival" and store.get(B) is None


def test_single_item_ambiguity_is_settled_from_the_returned_item(store: DynamoDBStorage) -> None:
    store.put(A, b"holder-1")
    faults = script(store, "PutItem", applied_then(read_timeout()))
    assert store.conditional_batch([Condition(A, b"holder-1")], [Put(A, b"holder-2")])
    assert len(faults.bodies) == 2
    # ALL_OLD carried the current item back with the failure: no extra read was needed.
    assert count(store, "GetItem") == 0 and count(store, "TransactGetItems") == 0
    assert store.get(A) == b"holder-2"


def test_single_item_delete_ambiguity_is_settled(store: DynamoDBStorage) -> None:
    store.put(A, b"holder")
    script(store, "DeleteItem", applied_then(aws_error("ServiceUnavailable", status=503)))
    assert store.conditional_batch([Condition(A, b"holder")], [Delete(A)]) is True
    assert store.get(A) is None


def test_plain_condition_failure_on_a_first_attempt_is_false_without_read_back(
    store: DynamoDBStorage,
) -> None:
    store.put(A, b"taken")
    assert not store.conditional_batch([Condition(A, None)], [Put(A, b"x"), Put(B, b"y")])
    assert not store.conditional_batch([Condition(A, None)], [Put(A, b"x")])
    assert count(store, "TransactGetItems") == 0
    assert store.get(A) == b"taken" and store.get(B) is None


def test_connect_failure_is_retried_as_not_sent(store: DynamoDBStorage) -> None:
    """A connect failure never reached DynamoDB: it is retried, and when the budget runs out
    the outcome is reported as known (nothing was applied)."""
    script(store, "PutItem", raises(EndpointConnectionError))
    store.put(A, b"v")
    assert store.get(A) == b"v"
    store.time_budget = 0.5
    script(store, "PutItem", *[raises(EndpointConnectionError)] * 100)
    with pytest.raises(StorageRetriesExhaustedError) as info:
        store.put(B, b"v")
    assert info.value.outcome_unknown is False


# -- typed errors ------------------------------------------------------------------------------


def test_validation_exception_is_a_storage_error_with_dynamodbs_message(
    store: DynamoDBStorage,
) -> None:
    message = "One or more parameter values were invalid: injected"
    script(store, "PutItem", aws_error("ValidationException", message))
    with pytest.raises(StorageRequestError) as info:
        store.put(A, b"v")
    assert info.value.service_code == "ValidationException"
    assert message in str(info.value) and info.value.operation == "PutItem"
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_validation_reason_inside_a_transaction_is_a_storage_error(store: DynamoDBStorage) -> None:
    script(store, "TransactWriteItems", cancelled("ValidationError", "None"))
    with pytest.raises(StorageRequestError, match="ValidationError"):
        store.batch([Put(A, b"1"), Put(B, b"2")])


def test_idempotent_parameter_mismatch_is_raised_loudly(store: DynamoDBStorage) -> None:
    script(store, "TransactWriteItems", aws_error("IdempotentParameterMismatchException"))
    with pytest.raises(StorageRequestError, match="IdempotentParameterMismatch"):
        store.batch([Put(A, b"1"), Put(B, b"2")])


def test_missing_table_is_a_storage_error(moto: MotoEnvironment) -> None:
    store = DynamoDBStorage("no-such-table", client=moto.client())
    with pytest.raises(StorageRequestError, match="ResourceNotFoundException"):
        store.get(A)


# -- time budget -------------------------------------------------------------------------------


def test_budget_exhausted_by_throttling_says_nothing_was_applied(
    store: DynamoDBStorage, clock: FakeClock
) -> None:
    store.time_budget = 1.0
    script(store, "TransactWriteItems", *[cancelled("TransactionConflict", "None")] * 100)
    with pytest.raises(StorageRetriesExhaustedError) as info:
        store.batch([Put(A, b"1"), Put(B, b"2")])
    assert isinstance(info.value, StorageUnavailableError)
    assert info.value.outcome_unknown is False and "nothing was applied" in str(info.value)
    assert clock.now <= 1.0
    assert list(store.scan(P)) == []


def test_budget_exhausted_after_a_lost_answer_says_the_outcome_is_unknown(
    store: DynamoDBStorage, clock: FakeClock
) -> None:
    store.time_budget = 0.5
    steps = [applied_then(aws_error("InternalServerError", status=500))]
    script(store, "PutItem", *steps * 100)
    with pytest.raises(StorageRetriesExhaustedError) as info:
        store.conditional_batch([Condition(A, None)], [Put(A, b"v")])
    assert info.value.outcome_unknown is True
    assert "UNKNOWN" in str(info.value) and info.value.attempts > 1
    assert clock.now <= 0.5
    # It did land: the caller must read back, as the message says.
    assert store.get(A) == b"v"


def test_callable_budget_with_no_time_left_sends_nothing(store: DynamoDBStorage) -> None:
    store.time_budget = lambda: 0.0
    faults = script(store, "PutItem")
    with pytest.raises(StorageRetriesExhaustedError) as info:
        store.put(A, b"v")
    assert faults.bodies == [] and info.value.outcome_unknown is False


def test_callable_budget_is_read_on_every_attempt(store: DynamoDBStorage, clock: FakeClock) -> None:
    deadline, reads = 0.3, []

    def budget() -> float:
        reads.append(clock.now)
        return deadline - clock.now

    store.time_budget = budget
    script(store, "PutItem", *[aws_error("ThrottlingException")] * 100)
    with pytest.raises(StorageRetriesExhaustedError):
        store.put(A, b"v")
    assert clock.now <= deadline
    assert len(set(reads)) > 1  # read again after sleeping, not once at the start
