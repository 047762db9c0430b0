"""Counters in storage keys sort as numbers, whatever their size.

Replay reads a workflow's records in key order (one range read), so a counter whose text
order differed from its number order would replay records out of order: with the old
zero-padded form, update ``#10000`` sorted before ``#1001``. ``keys.counter`` keeps the old
bytes for values that fit the old width (stored records stay valid) and sorts larger values
after them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft_serverless.storage import keys
from weft_serverless.storage.base import Put, Storage

WIDTHS = (3, 4, 8)
numbers = st.integers(min_value=0, max_value=10**30)
small_then_large = st.one_of(st.integers(0, 10**9), numbers)


@given(st.sampled_from(WIDTHS), st.lists(small_then_large, min_size=2, max_size=40))
def test_text_order_is_number_order(width: int, values: list[int]) -> None:
    assert sorted(keys.counter(n, width) for n in values) == [
        keys.counter(n, width) for n in sorted(values)
    ]


@given(st.sampled_from(WIDTHS), st.lists(small_then_large, min_size=2, max_size=40))
def test_order_holds_with_any_suffix(width: int, values: list[int]) -> None:
    """No encoding is a prefix of another, so what follows a counter in a key (a branch
    ``.001``, an attempt ``#0002``) cannot reorder two different counters."""
    texts = sorted((keys.counter(n, width) + suffix, n) for n in values for suffix in ("", ".~"))
    assert [n for _, n in texts] == sorted(n for n in values for _ in range(2))


@given(st.sampled_from(WIDTHS), numbers)
def test_counter_round_trips(width: int, value: int) -> None:
    text = keys.counter(value, width)
    assert keys.counter_value(text) == value
    assert text.isascii() and not set(text) & set("#.@")


@pytest.mark.parametrize("width", WIDTHS)
def test_values_within_the_old_width_keep_their_stored_bytes(width: int) -> None:
    for value in (0, 7, 10 ** (width - 1), 10**width - 1):
        assert keys.counter(value, width) == f"{value:0{width}d}"
    assert keys.counter(10**width, width) == f"~{width + 1:02d}1" + "0" * width


def test_every_counted_key_sorts_by_number() -> None:
    """The keys built from counters: update sequence, attempts, steps and branches."""
    wf, slot = "wf", keys.step_slot(3)
    for build in (
        lambda n: keys.update_applied_key(wf, slot, n).sort,
        lambda n: keys.attempt_key(wf, slot, n).sort,
        lambda n: keys.async_result_key(wf, slot, n).sort,
        lambda n: keys.activity_started_key(wf, slot, n).sort,
        lambda n: keys.op_key(wf, keys.step_slot(n)).sort,
        lambda n: keys.op_key(wf, keys.branch_slot(slot, n)).sort,
    ):
        values = [999, 1000, 1001, 9999, 10000, 10001, 10**8, 10**8 + 1, 123456789012]
        assert sorted(values, key=build) == values
    assert (
        keys.update_applied_key(wf, slot, 10000).sort > keys.update_applied_key(wf, slot, 9999).sort
    )


def test_slots_are_described_from_either_form() -> None:
    assert keys.describe_slot(keys.branch_slot(keys.step_slot(10**8), 1000)) == (
        "100000001 (branch 1001)"
    )
    assert keys.describe_slot("00000003.001") == "4 (branch 2)"


def test_a_negative_counter_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="negative"):
        keys.counter(-1, 4)


def test_every_backend_returns_counted_keys_in_number_order(storage: Storage) -> None:
    """A range read gives the records back in number order on each backend (DynamoDB
    compares sort keys as bytes, like the others)."""
    slot = keys.step_slot(0)
    values = [2, 999, 1000, 1001, 9999, 10000, 10001, 100000]
    written = [keys.update_applied_key("wf", slot, n) for n in values]
    storage.batch([Put(key, str(n).encode()) for key, n in zip(written, values, strict=True)])
    read = storage.scan(keys.workflow_partition("wf"), keys.UPDATE_APPLIED_PREFIX)
    assert [int(value) for _, value in read] == values
