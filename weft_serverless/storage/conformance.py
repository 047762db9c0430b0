"""The storage contract as a reusable pytest suite, so every backend is held to the same rules.

Subclass ``StorageConformance`` in a test module and provide a ``storage`` fixture that yields
a fresh, empty store::

    class TestMine(StorageConformance):
        @pytest.fixture
        def storage(self) -> Iterator[Storage]:
            store = MyStorage()
            yield store
            store.close()

Override ``storage_peer`` to return a second handle on the same store (another connection or
client) when the backend has one; the race test then runs across both handles. The suite
requires ``conditional_batch`` and sizes its big cases from the backend's own capabilities.

Each contract section is a mixin in its own module: ``conformance_reads`` (reads and scans),
``conformance_writes`` (batches and conditions) and ``conformance_limits`` (limits and
capabilities); metering is checked here.
"""

from __future__ import annotations

import pytest

from weft_serverless.storage.base import Condition, Delete, Key, Storage
from weft_serverless.storage.conformance_limits import Limits
from weft_serverless.storage.conformance_reads import ReadsAndScans
from weft_serverless.storage.conformance_support import P
from weft_serverless.storage.conformance_writes import BatchesAndConditions


class StorageConformance(ReadsAndScans, BatchesAndConditions, Limits):
    """Every behaviour DESIGN.md section 4 promises, checked by observation."""

    @pytest.fixture
    def storage_peer(self, storage: Storage) -> Storage:
        """A second handle on the same store; by default the same object."""
        return storage

    # -- metering ----------------------------------------------------------------------------

    def test_stats_count_each_kind_of_request(self, storage: Storage) -> None:
        key = Key(P, "a")
        before = storage.stats.snapshot()

        def moved() -> dict[str, int]:
            after = storage.stats.snapshot()
            return {
                name: after[name] - before[name] for name in after if after[name] != before[name]
            }

        storage.put(key, b"1")
        assert moved() == {"batches": 1, "items_written": 1, "requests": 1}
        assert storage.get(key) == b"1"
        assert moved()["gets"] == 1
        assert list(storage.scan(P)) == [("a", b"1")]
        assert (moved()["scans"], moved()["scanned_items"]) == (1, 1)
        assert storage.conditional_batch([Condition(key, b"1")], [Delete(key)])
        assert moved()["conditional_batches"] == 1
        assert (moved()["items_deleted"], moved().get("conditional_failures", 0)) == (1, 0)
        assert not storage.conditional_batch([Condition(key, b"1")], [Delete(key)])
        assert (moved()["conditional_batches"], moved()["conditional_failures"]) == (2, 1)
        assert moved()["items_deleted"] == 1
        assert moved()["requests"] == 5
