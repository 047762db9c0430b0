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
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from weft_serverless.errors import InvalidArgumentError, InvalidKeyError, StorageLimitError
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put, Storage

P = "p"
_BINARY = [b"\x00", b"\xff", b"\n", b"\r\n", b"\x00\xff\n", bytes(range(256)), b"", b"\x00" * 9]


def fill(storage: Storage, partition: str, items: Iterable[tuple[str, bytes]]) -> None:
    """Write ``(sort, value)`` pairs in batches no bigger than the backend allows."""
    size = storage.capabilities().max_batch_ops
    chunk: list[Op] = []
    for sort, value in items:
        chunk.append(Put(Key(partition, sort), value))
        if len(chunk) == size:
            storage.batch(chunk)
            chunk = []
    storage.batch(chunk)


def sorts(
    storage: Storage,
    prefix: str = "",
    *,
    gt: str | None = None,
    gte: str | None = None,
    lt: str | None = None,
    lte: str | None = None,
    limit: int | None = None,
    reverse: bool = False,
) -> list[str]:
    """The sort keys a scan of partition ``P`` yields, in the order it yields them."""
    pairs = storage.scan(P, prefix, gt=gt, gte=gte, lt=lt, lte=lte, limit=limit, reverse=reverse)
    return [sort for sort, _ in pairs]


def _contend(
    barrier: threading.Barrier, handle: Storage, condition: Condition, ops: Sequence[Op]
) -> bool:
    barrier.wait()
    return handle.conditional_batch([condition], ops)


def _thousand() -> list[str]:
    return [f"k{i:04d}" for i in range(1000)]


class StorageConformance:
    """Every behaviour DESIGN.md section 4 promises, checked by observation."""

    @pytest.fixture
    def storage_peer(self, storage: Storage) -> Storage:
        """A second handle on the same store; by default the same object."""
        return storage

    # -- point reads and writes --------------------------------------------------------------

    def test_get_on_empty_store_returns_none(self, storage: Storage) -> None:
        assert storage.get(Key(P, "missing")) is None

    def test_put_then_get_round_trips(self, storage: Storage) -> None:
        storage.put(Key(P, "a"), b"hello")
        assert storage.get(Key(P, "a")) == b"hello"

    def test_put_overwrites_previous_value(self, storage: Storage) -> None:
        storage.put(Key(P, "a"), b"first")
        storage.put(Key(P, "a"), b"second")
        assert storage.get(Key(P, "a")) == b"second"
        assert list(storage.scan(P)) == [("a", b"second")]

    def test_delete_removes_only_that_key(self, storage: Storage) -> None:
        fill(storage, P, [("a", b"1"), ("b", b"2")])
        storage.delete(Key(P, "a"))
        assert storage.get(Key(P, "a")) is None
        assert list(storage.scan(P)) == [("b", b"2")]

    def test_delete_of_missing_key_is_a_noop(self, storage: Storage) -> None:
        storage.put(Key(P, "a"), b"1")
        storage.delete(Key(P, "b"))
        storage.delete(Key("never-written", "a"))
        assert list(storage.scan(P)) == [("a", b"1")]

    def test_partitions_are_isolated(self, storage: Storage) -> None:
        # "a" is a string prefix of "ab": a backend that concatenates keys would leak here.
        storage.put(Key("a", "x"), b"in-a")
        storage.put(Key("ab", "x"), b"in-ab")
        storage.put(Key("a", "bx"), b"a-bx")
        assert storage.get(Key("a", "x")) == b"in-a"
        assert list(storage.scan("ab")) == [("x", b"in-ab")]
        storage.delete(Key("a", "x"))
        assert storage.get(Key("ab", "x")) == b"in-ab"
        assert list(storage.scan("a")) == [("bx", b"a-bx")]

    # -- scans -------------------------------------------------------------------------------

    def test_scan_prefix_yields_matching_keys_in_sort_order(self, storage: Storage) -> None:
        keys = ["a", "b1", "b3", "b2", "b", "ba", "c", "B2"]
        random.Random(7).shuffle(keys)
        fill(storage, P, [(k, k.encode()) for k in keys])
        assert list(storage.scan(P, "b")) == [
            (k, k.encode()) for k in ("b", "b1", "b2", "b3", "ba")
        ]

    def test_scan_orders_by_ascii_code_point(self, storage: Storage) -> None:
        keys = [" ", "!", "-", ".", "/", "0", "9", "A", "B", "Z", "_", "a", "a0", "aa", "b", "z"]
        keys += ["~", "a-", "a.", "a~", "\x7f"]
        shuffled = list(keys)
        random.Random(3).shuffle(shuffled)
        fill(storage, P, [(k, b"v") for k in shuffled])
        assert sorts(storage) == sorted(keys, key=lambda s: [ord(c) for c in s])

    def test_scan_with_empty_prefix_covers_the_whole_partition(self, storage: Storage) -> None:
        fill(storage, P, [("x", b"1"), ("a", b"2"), ("m", b"3")])
        storage.put(Key("other", "b"), b"4")
        assert list(storage.scan(P, "")) == [("a", b"2"), ("m", b"3"), ("x", b"1")]

    def test_scan_prefix_ending_in_the_top_ascii_characters(self, storage: Storage) -> None:
        fill(storage, P, [(k, b"v") for k in ("a}", "a~", "a~z", "a\x7f", "a\x7fz", "b")])
        assert sorts(storage, prefix="a~") == ["a~", "a~z"]
        assert sorts(storage, prefix="a\x7f") == ["a\x7f", "a\x7fz"]

    def test_scan_limit_caps_the_results(self, storage: Storage) -> None:
        fill(storage, P, [(f"k{i}", b"v") for i in range(6)])
        assert sorts(storage, limit=3) == ["k0", "k1", "k2"]
        assert sorts(storage, limit=50) == [f"k{i}" for i in range(6)]
        assert sorts(storage, limit=0) == []
        with pytest.raises(InvalidArgumentError):
            storage.scan(P, limit=-1)

    def test_scan_reverse_walks_from_the_top(self, storage: Storage) -> None:
        fill(storage, P, [(k, b"v") for k in ("a1", "b1", "b2", "b3", "c1")])
        assert sorts(storage, reverse=True) == ["c1", "b3", "b2", "b1", "a1"]
        assert sorts(storage, "b", reverse=True) == ["b3", "b2", "b1"]
        assert sorts(storage, reverse=True, limit=2) == ["c1", "b3"]

    def test_scan_strict_bounds_exclude_the_bound(self, storage: Storage) -> None:
        fill(storage, P, [(f"k{i}", b"v") for i in range(5)])
        assert sorts(storage, gt="k1") == ["k2", "k3", "k4"]
        assert sorts(storage, lt="k3") == ["k0", "k1", "k2"]
        assert sorts(storage, gt="k1", lt="k3") == ["k2"]
        assert sorts(storage, gt="k1", lt="k4", reverse=True) == ["k3", "k2"]

    def test_scan_inclusive_bounds_include_the_bound(self, storage: Storage) -> None:
        fill(storage, P, [(f"k{i}", b"v") for i in range(5)])
        assert sorts(storage, gte="k1") == ["k1", "k2", "k3", "k4"]
        assert sorts(storage, lte="k3") == ["k0", "k1", "k2", "k3"]
        assert sorts(storage, gte="k1", lte="k3", reverse=True) == ["k3", "k2", "k1"]

    def test_scan_bounds_need_not_be_stored_keys(self, storage: Storage) -> None:
        fill(storage, P, [(k, b"v") for k in ("b", "d", "f")])
        assert sorts(storage, gt="c", lt="e") == ["d"]
        assert sorts(storage, gte="c", lte="e") == ["d"]
        assert sorts(storage, gt="a", lt="g") == ["b", "d", "f"]

    def test_scan_bounds_intersect_the_prefix(self, storage: Storage) -> None:
        fill(storage, P, [(k, b"v") for k in ("a9", "b1", "b2", "b3", "b4", "c1")])
        assert sorts(storage, "b", gt="b2") == ["b3", "b4"]
        assert sorts(storage, "b", gte="b2", lt="b4") == ["b2", "b3"]
        # A bound outside the prefix's range leaves the prefix in charge of that side.
        assert sorts(storage, "b", gte="a") == ["b1", "b2", "b3", "b4"]
        assert sorts(storage, "b", lte="c5") == ["b1", "b2", "b3", "b4"]
        assert sorts(storage, "b", gt="a", lt="z", reverse=True, limit=3) == ["b4", "b3", "b2"]

    def test_scan_yields_nothing_when_nothing_matches(self, storage: Storage) -> None:
        assert sorts(storage) == []
        fill(storage, P, [(k, b"v") for k in ("a", "b", "c")])
        assert sorts(storage, "d") == []
        assert sorts(storage, gt="c") == []
        assert sorts(storage, lt="a") == []
        assert sorts(storage, gt="b", lt="b") == []
        assert sorts(storage, gte="c", lte="a") == []
        assert sorts(storage, "a", gt="a") == []

    # -- values ------------------------------------------------------------------------------

    def test_binary_values_round_trip_exactly(self, storage: Storage) -> None:
        items = [(f"v{i}", value) for i, value in enumerate(_BINARY)]
        fill(storage, P, items)
        assert [storage.get(Key(P, sort)) for sort, _ in items] == _BINARY
        assert list(storage.scan(P)) == items

    def test_empty_value_is_present_not_absent(self, storage: Storage) -> None:
        empty, absent = Key(P, "empty"), Key(P, "absent")
        storage.put(empty, b"")
        assert storage.get(empty) == b""
        assert list(storage.scan(P)) == [("empty", b"")]
        assert storage.conditional_batch([Condition(empty, b"")], []) is True
        assert storage.conditional_batch([Condition(empty, None)], []) is False
        assert storage.conditional_batch([Condition(absent, b"")], []) is False
        assert storage.conditional_batch([Condition(absent, None)], []) is True

    def test_value_of_max_size_round_trips(self, storage: Storage) -> None:
        size = storage.capabilities().max_value_bytes
        value = (bytes(range(256)) * (size // 256 + 1))[:size]
        storage.put(Key(P, "big"), value)
        assert storage.get(Key(P, "big")) == value

    # -- large partitions --------------------------------------------------------------------

    def test_thousand_keys_come_back_in_order(self, storage: Storage) -> None:
        keys = _thousand()
        shuffled = list(keys)
        random.Random(11).shuffle(shuffled)
        fill(storage, P, [(k, k.encode()) for k in shuffled])
        assert list(storage.scan(P)) == [(k, k.encode()) for k in keys]
        assert sorts(storage, reverse=True) == keys[::-1]
        assert sorts(storage, gte="k0250", lt="k0750") == keys[250:750]

    def test_partial_scan_leaves_the_store_usable(self, storage: Storage) -> None:
        fill(storage, P, [(k, b"v") for k in _thousand()])
        scan = storage.scan(P)
        assert [next(scan)[0] for _ in range(3)] == ["k0000", "k0001", "k0002"]
        # An open, half-read scan must hold no lock that blocks writes or other reads.
        storage.put(Key("other", "x"), b"1")
        assert storage.get(Key("other", "x")) == b"1"
        assert len(sorts(storage)) == 1000
        assert [sort for sort, _ in scan] == _thousand()[3:]

    def test_scan_limit_takes_the_ends_of_a_large_partition(self, storage: Storage) -> None:
        fill(storage, P, [(k, b"v") for k in _thousand()])
        assert sorts(storage, limit=5) == _thousand()[:5]
        assert sorts(storage, reverse=True, limit=5) == _thousand()[:-6:-1]

    def test_scan_during_writes_yields_stable_keys_once_in_order(self, storage: Storage) -> None:
        stable = [f"k{i:04d}" for i in range(0, 600, 2)]
        fill(storage, P, [(k, b"v") for k in stable])
        scan = storage.scan(P)
        seen = [next(scan)[0] for _ in range(10)]
        fill(storage, P, [(f"k{i:04d}", b"new") for i in range(1, 600, 6)])
        seen += [sort for sort, _ in scan]
        assert seen == sorted(set(seen)), "a scan repeated a key or left sort order"
        assert set(stable) <= set(seen)

    # -- batches -----------------------------------------------------------------------------

    def test_batch_applies_puts_and_deletes_together(self, storage: Storage) -> None:
        fill(storage, P, [("old", b"1"), ("keep", b"2")])
        storage.batch([Put(Key(P, "new"), b"3"), Delete(Key(P, "old")), Put(Key("q", "x"), b"4")])
        assert list(storage.scan(P)) == [("keep", b"2"), ("new", b"3")]
        assert storage.get(Key("q", "x")) == b"4"

    def test_empty_batch_is_a_noop(self, storage: Storage) -> None:
        storage.batch([])
        assert sorts(storage) == []

    def test_batch_with_an_oversized_value_applies_nothing(self, storage: Storage) -> None:
        storage.put(Key(P, "existing"), b"1")
        too_big = b"x" * (storage.capabilities().max_value_bytes + 1)
        ops: list[Op] = [Put(Key(P, "a"), b"ok"), Delete(Key(P, "existing"))]
        ops.append(Put(Key(P, "b"), too_big))
        with pytest.raises(StorageLimitError) as info:
            storage.batch(ops)
        assert info.value.limit == "value size"
        assert list(storage.scan(P)) == [("existing", b"1")]

    def test_batch_of_exactly_max_batch_ops_is_applied(self, storage: Storage) -> None:
        limit = storage.capabilities().max_batch_ops
        storage.batch([Put(Key(P, f"k{i:05d}"), b"v") for i in range(limit)])
        assert len(sorts(storage)) == limit

    def test_batch_over_max_batch_ops_is_refused_before_writing(self, storage: Storage) -> None:
        limit = storage.capabilities().max_batch_ops
        ops: list[Op] = [Put(Key(P, f"k{i:05d}"), b"v") for i in range(limit + 1)]
        with pytest.raises(StorageLimitError) as info:
            storage.batch(ops)
        assert (info.value.actual, info.value.maximum) == (limit + 1, limit)
        assert str(limit) in str(info.value)
        # Conditions count too: limit writes plus one condition-only key is one over.
        with pytest.raises(StorageLimitError):
            storage.conditional_batch([Condition(Key(P, "cond"), None)], ops[:limit])
        assert sorts(storage) == []

    def test_duplicate_key_in_one_batch_is_rejected(self, storage: Storage) -> None:
        key = Key(P, "a")
        with pytest.raises(InvalidArgumentError):
            storage.batch([Put(Key(P, "b"), b"1"), Put(key, b"1"), Delete(key)])
        with pytest.raises(InvalidArgumentError):
            storage.conditional_batch([Condition(key, None), Condition(key, b"1")], [])
        assert sorts(storage) == []

    def test_invalid_keys_are_rejected(self, storage: Storage) -> None:
        caps = storage.capabilities()
        bad = [Key("", "s"), Key(P, ""), Key("p\u00e9", "s"), Key(P, "s\u00e9")]
        bad += [
            Key("p" * (caps.max_partition_bytes + 1), "s"),
            Key(P, "s" * (caps.max_sort_bytes + 1)),
        ]
        for key in bad:
            with pytest.raises(InvalidKeyError):
                storage.get(key)
            with pytest.raises(InvalidKeyError):
                storage.put(key, b"v")
            with pytest.raises(InvalidKeyError):
                storage.delete(key)
            with pytest.raises(InvalidKeyError):
                storage.conditional_batch([Condition(key, None)], [Put(Key(P, "ok"), b"v")])
        for partition in ("", "p\u00e9", "p" * (caps.max_partition_bytes + 1)):
            with pytest.raises(InvalidKeyError):
                storage.scan(partition)
        assert storage.get(Key(P, "ok")) is None

    def test_keys_of_max_length_are_accepted(self, storage: Storage) -> None:
        caps = storage.capabilities()
        key = Key("p" * caps.max_partition_bytes, "s" * caps.max_sort_bytes)
        storage.put(key, b"v")
        assert storage.get(key) == b"v"
        assert list(storage.scan(key.partition)) == [(key.sort, b"v")]

    def test_delete_many_spans_more_keys_than_one_batch(self, storage: Storage) -> None:
        count = storage.capabilities().max_batch_ops + 5
        keys = [Key(P, f"k{i:05d}") for i in range(count)]
        fill(storage, P, [(keys[0].sort, b"first"), (keys[-1].sort, b"last"), ("keep", b"k")])
        assert storage.delete_many(keys + keys[:3]) == count
        assert list(storage.scan(P)) == [("keep", b"k")]

    # -- conditional batches -----------------------------------------------------------------

    def test_conditional_batch_applies_when_all_conditions_hold(self, storage: Storage) -> None:
        fill(storage, P, [("a", b"1"), ("b", b"2"), ("gone", b"3")])
        conditions = [Condition(Key(P, "a"), b"1"), Condition(Key(P, "b"), b"2")]
        ops: list[Op] = [Put(Key(P, "a"), b"10"), Put(Key(P, "c"), b"30")]
        ops.append(Delete(Key(P, "gone")))
        assert storage.conditional_batch(conditions, ops) is True
        assert list(storage.scan(P)) == [("a", b"10"), ("b", b"2"), ("c", b"30")]

    def test_conditional_batch_mismatch_applies_nothing(self, storage: Storage) -> None:
        before = [("a", b"1"), ("b", b"2"), ("gone", b"3")]
        fill(storage, P, before)
        conditions = [Condition(Key(P, "a"), b"1"), Condition(Key(P, "b"), b"stale")]
        ops: list[Op] = [Put(Key(P, "a"), b"10"), Put(Key(P, "c"), b"30")]
        ops += [Delete(Key(P, "gone")), Put(Key("q", "x"), b"elsewhere")]
        assert storage.conditional_batch(conditions, ops) is False
        assert list(storage.scan(P)) == before
        assert storage.get(Key("q", "x")) is None

    def test_conditional_comparison_is_byte_exact(self, storage: Storage) -> None:
        key = Key(P, "a")
        storage.put(key, b"abc")
        for wrong in (b"abc\x00", b"ab", b"ABC", b"abd", b""):
            assert storage.conditional_batch([Condition(key, wrong)], [Put(key, b"x")]) is False
        assert storage.get(key) == b"abc"
        assert storage.conditional_batch([Condition(key, b"abc")], [Put(key, b"x")]) is True
        assert storage.get(key) == b"x"

    def test_condition_only_key_is_checked_not_written(self, storage: Storage) -> None:
        guard, target = Key(P, "guard"), Key(P, "target")
        storage.put(guard, b"epoch-1")
        assert storage.conditional_batch([Condition(guard, b"epoch-1")], [Put(target, b"1")])
        assert storage.get(guard) == b"epoch-1"
        assert storage.get(target) == b"1"
        storage.put(guard, b"epoch-2")
        assert not storage.conditional_batch([Condition(guard, b"epoch-1")], [Put(target, b"2")])
        assert storage.get(target) == b"1"

    def test_absent_condition_holds_only_while_the_key_is_absent(self, storage: Storage) -> None:
        key = Key(P, "once")
        assert storage.conditional_batch([Condition(key, None)], [Put(key, b"first")]) is True
        assert storage.conditional_batch([Condition(key, None)], [Put(key, b"second")]) is False
        assert storage.get(key) == b"first"

    def test_condition_and_write_on_the_same_key(self, storage: Storage) -> None:
        key = Key(P, "counter")
        current: bytes | None = None
        for n in range(1, 4):
            new = str(n).encode()
            assert storage.conditional_batch([Condition(key, current)], [Put(key, new)]) is True
            current = new
        assert storage.conditional_batch([Condition(key, b"2")], [Put(key, b"stale")]) is False
        assert storage.conditional_batch([Condition(key, b"3")], [Delete(key)]) is True
        assert storage.get(key) is None

    def test_conditional_batch_without_ops_reports_the_check(self, storage: Storage) -> None:
        key = Key(P, "a")
        storage.put(key, b"1")
        assert storage.conditional_batch([Condition(key, b"1")], []) is True
        assert storage.conditional_batch([Condition(key, b"2")], []) is False
        assert list(storage.scan(P)) == [("a", b"1")]

    def test_conditional_batch_without_conditions_applies_ops(self, storage: Storage) -> None:
        assert storage.conditional_batch([], [Put(Key(P, "a"), b"1")]) is True
        assert storage.get(Key(P, "a")) == b"1"

    def test_racing_conditional_batches_have_exactly_one_winner(
        self, storage: Storage, storage_peer: Storage
    ) -> None:
        key, side = Key(P, "contested"), Key(P, "side")
        current: bytes | None = None
        with ThreadPoolExecutor(max_workers=2) as pool:
            for round_ in range(20):
                barrier = threading.Barrier(2, timeout=30)
                values = (f"{round_}-left".encode(), f"{round_}-right".encode())
                futures = [
                    pool.submit(
                        _contend,
                        barrier,
                        handle,
                        Condition(key, current),
                        [Put(key, v), Put(side, v)],
                    )
                    for handle, v in zip((storage, storage_peer), values, strict=True)
                ]
                results = [future.result() for future in futures]
                assert results.count(True) == 1, f"round {round_}: {results}"
                current = values[results.index(True)]
                assert storage.get(key) == current
                assert storage.get(side) == current

    # -- metering and capabilities -----------------------------------------------------------

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

    def test_capabilities_promise_the_full_contract(self, storage: Storage) -> None:
        caps = storage.capabilities()
        assert caps.conditional_batch and caps.atomic_batch
        assert caps.max_batch_ops >= 2
        assert min(caps.max_value_bytes, caps.max_partition_bytes, caps.max_sort_bytes) >= 1
        assert caps.persistence in ("ephemeral", "local", "remote")
