"""A crash right before or after the batch that writes a run's index items (its start, its
upsert step) leaves the index and the stored record in agreement (ADR 0030)."""

from __future__ import annotations

import pytest
from feature_support import (
    Opener,
    crashable_engine,
    expect_crash,
    op_sigs,
    puts_prefix,
    puts_state,
    recover_fresh,
)
from visibility_support import WORKFLOWS, assert_index_matches_state

from weft_serverless.storage import keys


@pytest.mark.parametrize("after", [True, False], ids=["after-batch", "before-batch"])
def test_a_crash_around_an_upsert_step_leaves_index_and_record_agreeing(
    storage_factory: Opener, after: bool
) -> None:
    te, crashing = crashable_engine(storage_factory, WORKFLOWS)
    crashing.arm(puts_prefix(keys.OP_PREFIX, "o"), after=after)
    with expect_crash():
        te.start("order", 900.0, id="o", search_attributes={"customer": "c", "amount": 1.0})
    storage = storage_factory()
    state = assert_index_matches_state(storage, "o")
    assert state is not None
    assert state.extra["sa"]["amount"] == (900.0 if after else 1.0)
    engine = recover_fresh(te, storage_factory)
    engine.recover_all()
    assert engine.describe("o").search_attributes == {"customer": "c", "amount": 900.0}
    assert [row.id for row in engine.list(where={"amount": 900.0})] == ["o"]
    assert engine.list(where={"amount": 1.0}) == []
    assert op_sigs(storage_factory(), "o")[:1] == ["upsert_search_attributes:amount"]
    assert_index_matches_state(storage_factory(), "o")


@pytest.mark.parametrize("after", [True, False], ids=["after-batch", "before-batch"])
def test_a_crash_around_a_start_leaves_index_and_record_agreeing(
    storage_factory: Opener, after: bool
) -> None:
    te, crashing = crashable_engine(storage_factory, WORKFLOWS)
    crashing.arm(puts_state("s"), after=after)
    with expect_crash():
        te.start("order", None, id="s", search_attributes={"customer": "c-3"}, tags=["vip"])
    state = assert_index_matches_state(storage_factory(), "s")
    assert (state is not None) == after
    engine = recover_fresh(te, storage_factory)
    expected = ["s"] if after else []
    assert [row.id for row in engine.list(where={"customer": "c-3"}, tags=["vip"])] == expected


def test_a_crash_around_a_terminal_move_keeps_the_status_filter_right(
    storage_factory: Opener,
) -> None:
    te, crashing = crashable_engine(storage_factory, WORKFLOWS)
    te.start("order", None, id="t", search_attributes={"customer": "c-4"}, tags=["vip"])
    crashing.arm(puts_state("t"), after=True)
    with expect_crash():
        te.signal("t", "ship")
    assert_index_matches_state(storage_factory(), "t")
    engine = recover_fresh(te, storage_factory)
    assert [row.id for row in engine.list(status="completed", tags=["vip"])] == ["t"]
    assert engine.list(status="running", where={"customer": "c-4"}) == []
