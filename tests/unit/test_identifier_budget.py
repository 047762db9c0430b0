"""Every key an accepted identifier can reach fits every backend's key limits.

The identifier limits are in UTF-8 bytes; percent-encoding turns each byte into at most three
key bytes. These cases build each key shape from the worst identifiers the checks accept, so
a key shape or a limit that drifts apart fails here, not in a stored run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from weft_serverless import InvalidArgumentError
from weft_serverless.identifiers import (
    MAX_DEDUP_ID_BYTES,
    MAX_NAME_BYTES,
    MAX_WORKFLOW_ID_BYTES,
    check_identifier,
    check_workflow_id,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.storage.memory import MemoryStorage

# The longest timer tag the engine writes for a step nested 40 branches deep (a budget
# deferral: "b{slot}#{attempt}#{ms}.{sequence}").
DEEP_SLOT = keys.step_slot(99_999_999) + ".999" * 40
LONGEST_TAG = f"b{DEEP_SLOT}#999999999#{keys.ms(4_102_444_800.0)}.{99_999_999:08d}"
SEQ = f"{keys.ms(4_102_444_800.0):016d}.{99_999_999:08d}.abcdef"  # signals.delivery_ops
PARTITION_BYTES = min(
    MemoryStorage().capabilities().max_partition_bytes,
    DynamoDBStorage("t").capabilities().max_partition_bytes,
)
SORT_BYTES = min(
    MemoryStorage().capabilities().max_sort_bytes,
    DynamoDBStorage("t").capabilities().max_sort_bytes,
)


def worst(max_bytes: int) -> list[str]:
    """Accepted identifiers of ``max_bytes`` UTF-8 bytes whose encoded form is longest."""
    return ["%" * max_bytes, "é" * (max_bytes // 2), "€" * (max_bytes // 3) + "%"]


WORKFLOW_KEYS: list[Callable[[str], Key]] = [
    keys.state_key,
    lambda wid: keys.op_key(wid, DEEP_SLOT),
    lambda wid: keys.attempt_key(wid, DEEP_SLOT, 9999),
    keys.owner_holder_key,
    lambda wid: keys.timer_key(keys.DEFAULT_SHARDS, 4_102_444_800.0, wid, LONGEST_TAG),
    lambda wid: keys.status_key(keys.DEFAULT_SHARDS, "timed-out", wid, 4_102_444_800.0),
    lambda wid: keys.claim_index_key(keys.DEFAULT_SHARDS, wid),
    keys.idempotency_key,
]
NAME_KEYS: list[Callable[[str], Key]] = [
    lambda name: keys.signal_key("w", name, SEQ),
    lambda name: keys.version_key("w", name),
]
DEDUP_KEYS: list[Callable[[str], Key]] = [
    lambda ident: keys.signal_id_key("w", ident),
    lambda ident: keys.update_response_key("w", ident),
]


@pytest.mark.parametrize(
    ("limit", "shapes"),
    [
        (MAX_WORKFLOW_ID_BYTES, WORKFLOW_KEYS),
        (MAX_NAME_BYTES, NAME_KEYS),
        (MAX_DEDUP_ID_BYTES, DEDUP_KEYS),
    ],
    ids=["workflow-id-and-idempotency-key", "names-and-change-ids", "dedup-ids"],
)
def test_the_longest_accepted_identifiers_fit_every_key_shape(
    limit: int, shapes: list[Callable[[str], Key]]
) -> None:
    for identifier in worst(limit):
        assert check_identifier(identifier, "field", limit) == identifier
        for shape in shapes:
            key = shape(identifier)
            assert len(key.partition) <= PARTITION_BYTES, key
            assert len(key.sort) <= SORT_BYTES, key
            assert key.partition.isascii() and key.sort.isascii()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x" * (MAX_WORKFLOW_ID_BYTES + 1), "257 bytes in UTF-8, over the limit of 256"),
        ("é" * 129, "258 bytes in UTF-8"),
        ("bad\ud800", "lone surrogate"),
        ("", "non-empty string"),
        (7, "non-empty string"),
        ("tab\tid", "control, format or separator characters"),
    ],
    ids=["ascii-over", "two-byte-over", "surrogate", "empty", "not-str", "control"],
)
def test_workflow_ids_over_the_byte_limit_are_refused_naming_the_field(
    value: object, message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        check_workflow_id(value, "id")
    assert info.value.field == "id"
    assert message in str(info.value)
