"""Listing by the start of a workflow type (``type_prefix``): what an operator types in the
console's Type field. It is applied to the index items the read already decodes, as
``workflow_type`` is: no other read, no scan."""

from __future__ import annotations

import pytest
from feature_support import Opener, make_engine
from visibility_support import WORKFLOWS

from weft_serverless import BulkPreview, InvalidFilterError
from weft_serverless.testing import TestEngine

pytestmark = pytest.mark.backends("memory", "sqlite")


@pytest.fixture
def te(storage_factory: Opener) -> TestEngine:
    engine = make_engine(storage_factory, WORKFLOWS)
    for n, kind in enumerate(["order", "plain", "order", "parent"]):
        engine.start(kind, None, id=f"{kind}-{n}")
        engine.advance(1)
    return engine


def test_list_count_and_bulk_take_a_type_prefix(te: TestEngine) -> None:
    ids = [row.id for row in te.engine.list(type_prefix="p")]
    assert ids == ["plain-1", "parent-3"]
    assert [row.id for row in te.engine.list(type_prefix="ord")] == ["order-0", "order-2"]
    assert te.engine.count("workflow_type", type_prefix="pa") == {"parent": 1}
    rows, _, counts = te.engine.list_page_with_counts("running", type_prefix="pl")
    assert [row.id for row in rows] == ["plain-1"] and counts == {"running": 1}
    preview = te.engine.cancel_all(type_prefix="ord", dry_run=True)
    assert isinstance(preview, BulkPreview) and preview.count == 2


def test_a_type_prefix_costs_the_reads_of_a_type_filter(te: TestEngine) -> None:
    stats = te.storage.stats
    stats.reset()
    te.engine.list(workflow_type="order")
    by_type = stats.snapshot()["scans"]
    stats.reset()
    te.engine.list(type_prefix="ord")
    assert stats.snapshot()["scans"] == by_type


@pytest.mark.parametrize("prefix", ["", 7])
def test_an_empty_or_non_text_prefix_is_refused(te: TestEngine, prefix: object) -> None:
    with pytest.raises(InvalidFilterError, match="type_prefix"):
        te.engine.list(type_prefix=prefix)  # type: ignore[arg-type]
