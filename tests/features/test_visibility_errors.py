"""Typed errors of search attributes, tags and filters: raised before any write, nothing
stored (ADR 0030)."""

from __future__ import annotations

import datetime
from collections.abc import Generator
from typing import Any

import pytest
from feature_support import Opener, WriteCount, make_engine
from visibility_support import WORKFLOWS, index_items

from weft_serverless import (
    InvalidArgumentError,
    InvalidFilterError,
    InvalidTagError,
    SearchAttributeError,
    WorkflowBuilderError,
    WorkflowContext,
    WorkflowNotFoundError,
    workflow,
)


def _noop(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.sleep(1)


@pytest.mark.parametrize(
    "declared",
    [
        {"amount": list},
        {"1st": str},
        {"customer": "str"},
        {f"a{i}": str for i in range(11)},
        ["customer"],
    ],
)
def test_a_bad_declaration_is_a_builder_error(declared: Any) -> None:
    with pytest.raises(WorkflowBuilderError):
        workflow("w", search_attributes=declared).execute(_noop)


@pytest.mark.parametrize(
    ("attributes", "tags", "error"),
    [
        ({"nope": "x"}, None, SearchAttributeError),
        ({"amount": "12"}, None, SearchAttributeError),
        ({"priority": 1.5}, None, SearchAttributeError),
        ({"rush": 1}, None, SearchAttributeError),
        ({"amount": float("nan")}, None, SearchAttributeError),
        ({"due": datetime.datetime(2026, 1, 1)}, None, SearchAttributeError),  # naive
        ({"customer": "x" * 300}, None, SearchAttributeError),
        ({}, ["ok", "not ok"], InvalidTagError),
        ({}, [f"t{i}" for i in range(11)], InvalidTagError),
        ({}, "vip", InvalidTagError),
        ({}, ["x" * 65], InvalidTagError),
        ({}, [[1]], InvalidTagError),  # unhashable: was a TypeError
        ({}, [{}], InvalidTagError),
        ({}, [None], InvalidTagError),
        ({}, ["vip\n"], InvalidTagError),
        ({}, [""], InvalidTagError),
        ({}, {"vip": True}, InvalidTagError),
        ({}, b"vip", InvalidTagError),
    ],
)
def test_a_bad_start_writes_nothing(
    storage_factory: Opener, attributes: dict[str, Any], tags: Any, error: type[Exception]
) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    before = WriteCount.of(te.storage)
    with pytest.raises(error) as raised:
        te.start("order", None, id="bad", search_attributes=attributes, tags=tags)
    assert isinstance(raised.value, InvalidArgumentError)
    assert raised.value.code == error.__name__
    assert WriteCount.of(te.storage).items == before.items
    with pytest.raises(WorkflowNotFoundError):
        te.describe("bad")
    assert index_items(te.storage, "bad") == {}


def test_a_type_without_declarations_takes_no_attributes(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    with pytest.raises(SearchAttributeError, match="declared: none"):
        te.start("plain", None, id="p", search_attributes={"customer": "c"})


def test_a_bad_upsert_fails_the_run_without_storing_the_value(storage_factory: Opener) -> None:
    """The check runs where the workflow makes the command: the run fails with the typed
    error at that line, and the index keeps the attributes it had."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("bad-upsert", None, id="b", search_attributes={"amount": 5.0})
    described = te.describe("b")
    assert described.status == "failed"
    assert "SearchAttributeError" in str(described.error)
    assert described.search_attributes == {"amount": 5.0}
    assert [row.id for row in te.list(where={"amount": 5.0})] == ["b"]


@pytest.mark.parametrize(
    "filters",
    [
        {"where": {"amount": ("~", 1)}},
        {"where": {"amount": (">=",)}},
        {"where": {"amount": ("in", [])}},
        {"where": {"region": ("prefix", 3)}},
        {"where": {"amount": "many"}},
        {"where": {"other": [1, 2]}},
        {"where": ["customer"]},
        {"order": "sideways"},
        {"tags": ["a b"]},
        {"tags": [{}]},
        {"tags": [[1]]},
        {"started_after": "yesterday"},
        {"started_before": datetime.datetime(2026, 1, 1)},
        {"id_prefix": ""},
        {"status": "asleep"},
    ],
)
def test_a_bad_filter_is_refused_before_any_read(
    storage_factory: Opener, filters: dict[str, Any]
) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    scans = te.storage.stats.scans
    with pytest.raises(InvalidArgumentError):
        te.list(**filters)
    with pytest.raises(InvalidArgumentError):
        te.count(**{k: v for k, v in filters.items() if k != "order"} or {"group_by": ""})
    assert te.storage.stats.scans == scans


@pytest.mark.parametrize("tags", [[{}], [[1]], ["a b"], "vip"])
def test_a_bulk_filter_with_a_bad_tag_is_refused_before_any_read(
    storage_factory: Opener, tags: Any
) -> None:
    """Bulk operations filter through the same tag check as ``list``: typed, nothing read."""
    te = make_engine(storage_factory, WORKFLOWS)
    scans, before = te.storage.stats.scans, WriteCount.of(te.storage)
    for act in (te.cancel_all, te.retry_failed_all):
        with pytest.raises(InvalidTagError):
            act(tags=tags, dry_run=True)
    with pytest.raises(InvalidTagError):
        te.signal_all("go", None, tags=tags, dry_run=True)
    assert te.storage.stats.scans == scans
    assert WriteCount.of(te.storage).items == before.items


def test_a_child_started_with_a_bad_tag_fails_the_parent_at_that_line(
    storage_factory: Opener,
) -> None:
    te = make_engine(storage_factory, {**WORKFLOWS, "bad-child": _bad_child})
    te.start("bad-child", None, id="p")
    described = te.describe("p")
    assert described.status == "failed"
    assert described.error is not None and described.error["type"] == "InvalidTagError"
    with pytest.raises(WorkflowNotFoundError):
        te.describe("c")


def _child_with_bad_tag(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.start_child("plain", None, id="c", tags=[["nested"]])


_bad_child = workflow("bad-child").execute(_child_with_bad_tag)


def test_a_bad_group_by_is_a_filter_error(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    with pytest.raises(InvalidFilterError):
        te.count(group_by="")


def test_a_value_too_long_for_an_index_key_writes_nothing(storage_factory: Opener) -> None:
    """The key holds the percent-encoded value and id: a start whose key would pass the
    backends' 1,024-byte sort key limit is refused before any write; a shorter one fits."""
    te = make_engine(storage_factory, WORKFLOWS)
    long_id = "\u00e9" * 128  # 256 bytes, 768 once encoded
    before = WriteCount.of(te.storage)
    with pytest.raises(SearchAttributeError, match="index key"):
        te.start("order", None, id=long_id, search_attributes={"customer": "\u00e9" * 50})
    assert WriteCount.of(te.storage).items == before.items
    te.start("order", None, id=long_id, search_attributes={"customer": "x" * 200})
    assert [row.id for row in te.list(where={"customer": "x" * 200})] == [long_id]


def test_an_upsert_too_long_for_an_index_key_fails_the_run(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, {**WORKFLOWS, "long": _long_upsert})
    te.start("long", None, id="\u00e9" * 128, search_attributes={"customer": "c"})
    described = te.describe("\u00e9" * 128)
    assert described.status == "failed"
    assert "index key" in str(described.error)
    assert described.search_attributes == {"customer": "c"}


def _long(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.upsert_search_attributes({"customer": "\u00e9" * 50})


_long_upsert = workflow("long", search_attributes={"customer": str}).execute(_long)
