"""Contract section: batches and conditions, the atomic writes the engine commits with.

A batch applies all of its puts and deletes or none; a conditional batch applies only if every
condition holds byte for byte (``None`` meaning absent) and otherwise applies nothing; of two
racing conditional batches exactly one wins; ``delete_many`` spans any number of keys.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from weft_serverless.storage.base import Condition, Delete, Key, Op, Put, Storage
from weft_serverless.storage.conformance_support import P, fill, sorts


def _contend(
    barrier: threading.Barrier, handle: Storage, condition: Condition, ops: Sequence[Op]
) -> bool:
    barrier.wait()
    return handle.conditional_batch([condition], ops)


class BatchesAndConditions:
    """How a backend writes: atomically, and only when its conditions hold."""

    # -- batches -----------------------------------------------------------------------------

    def test_batch_applies_puts_and_deletes_together(self, storage: Storage) -> None:
        fill(storage, P, [("old", b"1"), ("keep", b"2")])
        storage.batch([Put(Key(P, "new"), b"3"), Delete(Key(P, "old")), Put(Key("q", "x"), b"4")])
        assert list(storage.scan(P)) == [("keep", b"2"), ("new", b"3")]
        assert storage.get(Key("q", "x")) == b"4"

    def test_empty_batch_is_a_noop(self, storage: Storage) -> None:
        storage.batch([])
        assert sorts(storage) == []

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

    def test_absent_condition_on_a_put_key_refuses_the_whole_batch(self, storage: Storage) -> None:
        """A step's batch: its op record must be absent, alongside other conditions and
        writes. Whichever condition fails, nothing of the batch lands."""
        step, guard, other, gone = Key(P, "op"), Key(P, "guard"), Key(P, "other"), Key(P, "gone")
        storage.batch([Put(step, b"taken"), Put(guard, b"epoch-1"), Put(gone, b"kept")])
        ops: list[Op] = [Put(step, b"mine"), Put(other, b"mine"), Delete(gone)]
        holds, stale = Condition(guard, b"epoch-1"), Condition(guard, b"epoch-0")
        assert storage.conditional_batch([Condition(step, None), holds], ops) is False
        assert storage.conditional_batch([stale, Condition(step, None)], ops) is False
        assert storage.get(step) == b"taken"
        assert storage.get(other) is None
        assert storage.get(gone) == b"kept"
        storage.delete(step)
        assert storage.conditional_batch([Condition(step, None), holds], ops) is True
        assert [storage.get(k) for k in (step, other, gone)] == [b"mine", b"mine", None]

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

    def test_racing_bare_step_commits_have_exactly_one_winner(
        self, storage: Storage, storage_peer: Storage
    ) -> None:
        """Two writers commit the same step and nothing else (its record absent until then,
        the batch of an unfenced step): one wins, and the record holds the winner's value."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            for round_ in range(20):
                key = Key(P, f"bare-{round_:02d}")
                barrier = threading.Barrier(2, timeout=30)
                futures = [
                    pool.submit(
                        _contend, barrier, handle, Condition(key, None), [Put(key, name.encode())]
                    )
                    for handle, name in ((storage, "left"), (storage_peer, "right"))
                ]
                results = [future.result() for future in futures]
                assert results.count(True) == 1, f"round {round_}: {results}"
                assert storage.get(key) == (b"left" if results[0] else b"right")

    def test_racing_first_writes_of_a_key_have_exactly_one_winner(
        self, storage: Storage, storage_peer: Storage
    ) -> None:
        """Two writers commit the same step (its record absent until then), each with a write
        of its own: one wins, and nothing of the loser's batch lands."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            for round_ in range(20):
                key = Key(P, f"step-{round_:02d}")
                barrier = threading.Barrier(2, timeout=30)
                futures = [
                    pool.submit(
                        _contend,
                        barrier,
                        handle,
                        Condition(key, None),
                        [Put(key, name.encode()), Put(Key(P, f"{name}-{round_:02d}"), b"1")],
                    )
                    for handle, name in ((storage, "left"), (storage_peer, "right"))
                ]
                results = [future.result() for future in futures]
                assert results.count(True) == 1, f"round {round_}: {results}"
                winner, loser = ("left", "right") if results[0] else ("right", "left")
                assert storage.get(key) == winner.encode()
                assert storage.get(Key(P, f"{winner}-{round_:02d}")) == b"1"
                assert storage.get(Key(P, f"{loser}-{round_:02d}")) is None
