"""Contract section: reads and scans, from one key to a thousand-key partition.

Point reads and writes, partition isolation, scan order (ASCII code point), prefixes, bounds,
limits and reverse, byte-exact values, and scans of large partitions, including half-read
scans and scans that overlap writes (DESIGN.md section 4).
"""

from __future__ import annotations

import random

import pytest

from weft_serverless.errors import InvalidArgumentError
from weft_serverless.storage.base import Condition, Key, Storage
from weft_serverless.storage.conformance_support import P, fill, sorts

_BINARY = [b"\x00", b"\xff", b"\n", b"\r\n", b"\x00\xff\n", bytes(range(256)), b"", b"\x00" * 9]


def _thousand() -> list[str]:
    return [f"k{i:04d}" for i in range(1000)]


class ReadsAndScans:
    """What a backend returns: ``get`` and ``scan``, on every key shape and partition size."""

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
