"""A page of runs and the counts per status from one read (``list_page_with_counts``): the
same rows, cursors and counts as ``list_page`` beside ``count("status")``, at half the
reads. The console's runs page asks for both every few seconds."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from feature_support import T0, Opener, make_engine
from visibility_support import WORKFLOWS

from weft_serverless import WORKFLOW_STATUSES
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

pytestmark = pytest.mark.backends("memory", "sqlite")

FILTERS: list[dict[str, Any]] = [
    {},
    {"workflow_type": "order"},
    {"where": {"customer": "c-7"}},
    {"where": {"amount": (">=", 100)}},
    {"tags": ["vip"]},
    {"id_prefix": "order-1"},
    {"started_after": T0 + 3, "started_before": T0 + 9},
    {"workflow_type": "plain", "started_after": T0 + 2},
]


def _seed(te: TestEngine) -> None:
    """Twelve runs a second apart in four statuses, with attributes and tags."""
    for n in range(12):
        kind = "plain" if n % 4 == 3 else "order"
        options: dict[str, Any] = {"tags": ["vip"] if n % 3 == 0 else []}
        if kind == "order":
            options["search_attributes"] = {"customer": f"c-{7 + n % 2}", "amount": 40.0 * n}
        te.start(kind, None, id=f"{kind}-{n}", **options)
        te.advance(1)
        if n % 5 == 1:
            te.engine.signal(f"{kind}-{n}", "ship" if kind == "order" else "go")
        elif n % 5 == 2:
            te.engine.cancel(f"{kind}-{n}")
        elif n % 5 == 3:
            te.engine.suspend(f"{kind}-{n}")


@pytest.fixture
def te(storage_factory: Opener) -> TestEngine:
    engine = make_engine(storage_factory, WORKFLOWS)
    _seed(engine)
    return engine


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: ",".join(f) or "none")
def test_pages_and_counts_are_those_of_list_page_and_count(
    te: TestEngine, filters: dict[str, Any]
) -> None:
    counts = te.engine.count("status", **filters)
    assert sum(counts.values()) > 0
    for status, order, limit in itertools.product(
        (None, "running", "completed", "suspended"), ("oldest", "newest"), (1, 2, 5, 50)
    ):
        cursor: str | None = None
        while True:
            rows, after, counted = te.engine.list_page_with_counts(
                status, limit=limit, cursor=cursor, order=order, **filters
            )
            expected = te.engine.list_page(
                status, limit=limit, cursor=cursor, order=order, **filters
            )
            assert (rows, after) == expected, (status, order, limit, cursor)
            assert counted == counts
            if after is None:
                break
            cursor = after


def test_one_read_of_each_partition_the_counts_need(te: TestEngine) -> None:
    assert set(te.engine.count("status")) == {"running", "completed", "cancelled", "suspended"}
    stats = te.storage.stats
    partitions = len(WORKFLOW_STATUSES) * keys.STATUS_SHARDS
    stats.reset()
    te.engine.list_page_with_counts(limit=5)
    together = stats.snapshot()["scans"]
    stats.reset()
    te.engine.list_page(limit=5)
    te.engine.count("status")
    apart = stats.snapshot()["scans"]
    assert (together, apart) == (partitions, 2 * partitions)
