"""Contract section: limits, what a backend refuses before it writes and the most it accepts.

Batches up to ``max_batch_ops`` and values up to ``max_value_bytes`` are applied; one more is
refused with ``StorageLimitError`` and nothing is written. Invalid keys and a key repeated in
one batch are refused the same way. The capabilities must promise the whole contract.
"""

from __future__ import annotations

import pytest

from weft_serverless.errors import InvalidArgumentError, InvalidKeyError, StorageLimitError
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put, Storage
from weft_serverless.storage.conformance_support import P, sorts


class Limits:
    """The sizes a backend declares in ``capabilities()``, held at their edges."""

    def test_value_of_max_size_round_trips(self, storage: Storage) -> None:
        size = storage.capabilities().max_value_bytes
        value = (bytes(range(256)) * (size // 256 + 1))[:size]
        storage.put(Key(P, "big"), value)
        assert storage.get(Key(P, "big")) == value

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

    def test_a_condition_on_a_key_the_batch_writes_counts_once(self, storage: Storage) -> None:
        limit = storage.capabilities().max_batch_ops
        ops: list[Op] = [Put(Key(P, f"k{i:05d}"), b"v") for i in range(limit)]
        assert storage.conditional_batch([Condition(Key(P, "k00000"), None)], ops)
        assert len(sorts(storage)) == limit

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

    def test_capabilities_promise_the_full_contract(self, storage: Storage) -> None:
        caps = storage.capabilities()
        assert caps.conditional_batch and caps.atomic_batch
        assert caps.max_batch_ops >= 2
        assert min(caps.max_value_bytes, caps.max_partition_bytes, caps.max_sort_bytes) >= 1
        assert caps.persistence in ("ephemeral", "local", "remote")
