"""Search attributes and tags: filters, ordering, paging and counts on every backend, kept
right by upserts, status changes and purge (ADR 0030)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from feature_support import T0, Opener, make_engine
from visibility_support import WORKFLOWS, assert_index_matches_state, index_items

from weft_serverless.engine.visibility import listing
from weft_serverless.testing import TestEngine

UTC = datetime.UTC


def _seed(te: TestEngine) -> None:
    """Six orders a second apart (order-0 oldest) and one untyped run."""
    rows: list[tuple[str, dict[str, Any], list[str]]] = [
        ("order-0", {"customer": "c-7", "amount": 50.0, "region": "eu"}, []),
        ("order-1", {"customer": "c-7", "amount": 120.0, "region": "us"}, ["vip"]),
        ("order-2", {"customer": "c-8", "amount": 300.0, "region": "eu"}, ["vip"]),
        ("order-3", {"customer": "c-7", "amount": 100, "region": "eu"}, ["vip", "late"]),
        ("order-4", {"customer": "c-9", "amount": 99.5}, []),
        ("order-5", {"customer": "c-7", "amount": 700.0, "region": "apac"}, ["vip"]),
    ]
    for workflow_id, attributes, tags in rows:
        te.start("order", None, id=workflow_id, search_attributes=attributes, tags=tags)
        te.advance(1)
    te.start("plain", None, id="other-0")


def _ids(rows: list[Any]) -> list[str]:
    return [row.id for row in rows]


def test_filters_combine_on_attributes_tags_time_and_id(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    _seed(te)
    assert _ids(te.list(where={"customer": "c-7"})) == ["order-0", "order-1", "order-3", "order-5"]
    assert _ids(te.list(where={"customer": "c-7", "amount": (">=", 100)}, tags=["vip"])) == [
        "order-1",
        "order-3",
        "order-5",
    ]
    assert _ids(te.list(where={"amount": 100.0})) == ["order-3"]  # an int 100 was stored
    assert _ids(te.list(where={"region": ("in", ["us", "apac"])})) == ["order-1", "order-5"]
    assert _ids(te.list(where={"region": ("prefix", "a")})) == ["order-5"]
    # ``!=`` also matches a run without the attribute (order-4 has no region, other-0 none).
    assert _ids(te.list(where={"region": ("!=", "eu")})) == [
        "order-1",
        "order-4",
        "order-5",
        "other-0",
    ]
    assert _ids(te.list(where={"amount": ("<", 100)})) == ["order-0", "order-4"]
    assert _ids(te.list(tags=["vip", "late"])) == ["order-3"]
    window = te.list(
        where={"customer": "c-7"}, started_after=T0 + 1, started_before=T0 + 5, order="newest"
    )
    assert _ids(window) == ["order-3", "order-1"]
    after = datetime.datetime.fromtimestamp(T0 + 2, UTC)
    assert _ids(te.list(workflow_type="order", started_after=after)) == [
        "order-2",
        "order-3",
        "order-4",
        "order-5",
    ]
    assert _ids(te.list(id_prefix="other-")) == ["other-0"]
    assert _ids(te.list(status="running", workflow_type="plain")) == ["other-0"]
    row = te.list(where={"customer": "c-8"})[0]
    assert (row.workflow_type, row.status, row.tags) == ("order", "running", ("vip",))
    assert row.search_attributes == {"customer": "c-8", "amount": 300.0, "region": "eu"}
    described = te.describe("order-2")
    assert described.search_attributes == row.search_attributes
    assert described.tags == ("vip",)


def test_pages_follow_the_cursor_in_either_order(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    _seed(te)
    for order in ("oldest", "newest"):
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            rows, cursor = te.list_page(
                limit=2, cursor=cursor, where={"customer": "c-7"}, order=order
            )
            seen += _ids(rows)
            pages += 1
            if cursor is None:
                break
        expected = ["order-0", "order-1", "order-3", "order-5"]
        assert seen == (expected if order == "oldest" else expected[::-1])
        assert pages == 2
    # The positional form callers used before filters existed still pages by status and type.
    rows, cursor = te.list_page("running", "order", 4, None)
    assert _ids(rows) == ["order-0", "order-1", "order-2", "order-3"]
    rows, cursor = te.list_page("running", "order", 4, cursor)
    assert (_ids(rows), cursor) == (["order-4", "order-5"], None)


def test_count_groups_by_status_type_or_attribute(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    _seed(te)
    te.signal("order-1", "ship")
    te.cancel("order-5")
    assert te.count(group_by="status") == {"running": 5, "completed": 1, "cancelled": 1}
    assert te.count(group_by="workflow_type") == {"order": 6, "plain": 1}
    assert te.count(group_by="region", workflow_type="order") == {
        "eu": 3,
        "us": 1,
        None: 1,
        "apac": 1,
    }
    assert te.count(group_by="status", where={"customer": "c-7"}) == {
        "running": 2,
        "completed": 1,
        "cancelled": 1,
    }
    assert te.count(group_by="customer", tags=["vip"], status="running") == {"c-8": 1, "c-7": 1}


def test_counts_per_status_read_the_status_keys_alone(
    storage_factory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting by status under status, time and id filters decodes no index item, and
    agrees with the runs listed (the runs page counts every few seconds)."""
    te = make_engine(storage_factory, WORKFLOWS)
    _seed(te)
    te.signal("order-1", "ship")
    te.cancel("order-5")
    filters: list[dict[str, Any]] = [
        {},
        {"status": "running"},
        {"started_after": T0 + 1, "started_before": T0 + 4},
        {"id_prefix": "order-", "started_after": T0 + 1},
    ]
    expected = []
    for where in filters:
        counted: dict[str, int] = {}
        for row in te.list(limit=100, **where):
            counted[row.status] = counted.get(row.status, 0) + 1
        expected.append(counted)

    def no_decode(value: bytes) -> dict[str, Any]:
        raise AssertionError("a count by status decoded an index item")

    monkeypatch.setattr(listing, "decode_item", no_decode)
    assert [te.count(group_by="status", **where) for where in filters] == expected
    assert expected[0] == {"running": 5, "completed": 1, "cancelled": 1}
    assert expected[2] == {"running": 2, "completed": 1}  # order-1, order-2, order-3
    assert expected[3] == {"running": 3, "completed": 1, "cancelled": 1}


def test_status_changes_keep_a_status_and_attribute_filter_right(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    _seed(te)
    te.signal("order-1", "ship")
    te.cancel("order-3")
    assert _ids(te.list(status="running", where={"customer": "c-7"})) == ["order-0", "order-5"]
    assert _ids(te.list(status="completed", where={"customer": "c-7"})) == ["order-1"]
    assert _ids(te.list(status="cancelled", tags=["vip"])) == ["order-3"]
    te.suspend("order-0")
    assert _ids(te.list(status="suspended", where={"customer": "c-7"})) == ["order-0"]
    assert _ids(te.list(status="running", where={"customer": "c-7"})) == ["order-5"]
    te.resume("order-0")
    assert _ids(te.list(status="suspended", where={"customer": "c-7"})) == []
    assert _ids(te.list(status="running", where={"customer": "c-7"})) == ["order-0", "order-5"]
    storage = storage_factory()
    for workflow_id in ("order-0", "order-1", "order-3", "order-5", "other-0"):
        assert_index_matches_state(storage, workflow_id)


def test_an_upsert_replaces_the_old_value_in_the_index(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("order", 800.0, id="up", search_attributes={"customer": "c-1", "amount": 10.0})
    assert _ids(te.list(where={"amount": 10.0})) == []
    assert _ids(te.list(where={"amount": 800.0})) == ["up"]
    assert te.describe("up").search_attributes == {"customer": "c-1", "amount": 800.0}
    state = assert_index_matches_state(storage_factory(), "up")
    assert state is not None
    te.signal("up", "ship")  # replays the upsert: nothing written again, the run completes
    assert te.describe("up").status == "completed"
    assert _ids(te.list(status="completed", where={"amount": 800.0})) == ["up"]
    assert_index_matches_state(storage_factory(), "up")


def test_a_purge_deletes_the_index_items(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS, retention={"completed": "1h"})
    te.start("order", None, id="gone", search_attributes={"customer": "c-1"}, tags=["vip"])
    te.signal("gone", "ship")
    storage = storage_factory()
    assert len(index_items(storage, "gone")) == 3  # status entry, customer, vip
    te.advance(3601)
    assert index_items(storage, "gone") == {}
    assert te.list(where={"customer": "c-1"}) == []
    assert te.count(tags=["vip"]) == {}


def test_a_run_without_attributes_writes_only_its_status_entry(storage_factory: Opener) -> None:
    """Runs that use no visibility feature store the index exactly as before it existed."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("plain", None, id="p")
    items = index_items(storage_factory(), "p")
    assert len(items) == 1
    assert list(items.values()) == [b"\x81\xa4type\xa5plain"]


def test_a_child_starts_with_its_attributes_and_tags(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    assert te.start("parent", 5.0, id="p").result() == "started"
    rows = te.list(where={"customer": "from-parent"}, tags=["child"])
    assert [(row.id, row.search_attributes) for row in rows] == [
        ("child", {"customer": "from-parent", "amount": 5.0})
    ]
    assert_index_matches_state(storage_factory(), "child")


def test_a_child_with_a_bad_attribute_is_not_started(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    assert te.start("parent", "lots", id="p").result() == "not-started"
    assert index_items(storage_factory(), "child") == {}


@pytest.mark.parametrize("ownership", ["lease", "workflow-lease"])
def test_an_upsert_commits_under_the_fenced_modes(storage_factory: Opener, ownership: str) -> None:
    """The upsert's state condition rides with the fence's conditions in one batch."""
    te = make_engine(storage_factory, WORKFLOWS, ownership=ownership)
    te.start("order", 800.0, id="up", search_attributes={"amount": 10.0}, tags=["vip"])
    assert _ids(te.list(where={"amount": 800.0})) == ["up"]
    te.signal("up", "ship")
    assert _ids(te.list(status="completed", tags=["vip"], where={"amount": 800.0})) == ["up"]
    assert_index_matches_state(storage_factory(), "up")
