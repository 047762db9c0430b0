"""Shard counts per store (ADR 0050): chosen when the store is created, kept in its
``meta/shards`` marker, read once when an engine opens it, used by every key that picks a
shard; a store without a marker keeps the default layout; a choice the store cannot take is
refused before anything is written."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import ORDER, FixedSink, Opener

from weft_serverless import ConfigurationError, Engine
from weft_serverless.codec import decode
from weft_serverless.engine.persistence.records import STATUSES
from weft_serverless.storage import keys, shard_layout
from weft_serverless.storage.base import Key, Storage
from weft_serverless.testing import CrashingStorage, DelegatingStorage, SimulatedCrash, VirtualClock

CHOSEN = {"timers": 7, "status": 3, "claims": 5, "visibility": 2, "outbox": 6}
COUNTS = keys.ShardCounts(**CHOSEN)
RUNS = 12
BEYOND = 10  # partitions past every count scanned, to see that nothing landed there


class MarkerReads(DelegatingStorage):
    """Counts reads of the shard-count marker."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.marker_reads = 0

    def _get(self, key: Key) -> bytes | None:
        if key == keys.meta_key(keys.LAYOUT):
            self.marker_reads += 1
        return super()._get(key)


def _open(storage: Storage, clock: VirtualClock, **options: Any) -> Engine:
    return Engine.create(
        storage,
        {"order": ORDER},
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        recover=False,
        events=FixedSink(accept=False),
        **options,
    )


def _ids_by_shard(storage: Storage, partition: Any, id_of: Any) -> dict[int, set[str]]:
    """The workflow ids each shard of one index holds, over every count and beyond."""
    found: dict[int, set[str]] = {}
    for shard in range(max(CHOSEN.values()) + BEYOND):
        ids = {id_of(sort) for sort, _ in storage.scan(partition(shard))}
        if ids:
            found[shard] = ids
    return found


def _expected(count: int) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for index in range(RUNS):
        wf = f"order-{index}"
        out.setdefault(keys.shard_of(wf, count), set()).add(wf)
    return out


def _last_id(sort: str) -> str:
    return keys.dec(sort.rsplit("#", 1)[1])


def test_a_store_created_with_counts_puts_every_index_item_in_its_own_shards(
    storage_factory: Opener,
) -> None:
    clock = VirtualClock()
    storage = MarkerReads(storage_factory())
    engine = _open(storage, clock, shards=CHOSEN)
    marker = storage.get(keys.meta_key(keys.LAYOUT))
    assert marker is not None and decode(marker)["counts"] == CHOSEN
    assert engine.runtime.shards == COUNTS

    with engine.invocation():
        for index in range(RUNS):
            engine.start(
                "order",
                id=f"order-{index}",
                search_attributes={"customer": f"c{index % 3}"},
                tags=["vip"],
            )
        claims = _ids_by_shard(storage, keys.claim_partition, keys.dec)
    # A store of layout 3 keeps the holder in the run's head and indexes no claim (ADR
    # 0056); the claims count still places the entries of runs a layout-2 store holds.
    assert claims == {}

    timers = _ids_by_shard(storage, keys.timer_partition, lambda s: keys.dec(s.split("#")[1]))
    assert timers == _expected(CHOSEN["timers"])
    running = _ids_by_shard(
        storage, lambda s: keys.status_partition("running", s), keys.status_entry_id
    )
    assert running == _expected(CHOSEN["status"])
    assert _ids_by_shard(storage, keys.tag_partition, _last_id) == _expected(CHOSEN["visibility"])
    assert _ids_by_shard(
        storage, lambda s: keys.attribute_partition("customer", s), _last_id
    ) == _expected(CHOSEN["visibility"])

    clock.advance(5.0)
    assert engine.run_maintenance().timers_fired >= RUNS  # every sleep, read from 7 shards
    with engine.invocation():
        for index in range(RUNS):
            engine.signal(f"order-{index}", "ship")
    assert [engine.get_handle(f"order-{i}").result() for i in range(RUNS)] == ["shipped"] * RUNS
    assert len(engine.list(status="completed")) == RUNS
    assert len(engine.list(tags=["vip"])) == RUNS
    assert {s.id for s in engine.list(where={"customer": "c1"})} == {
        f"order-{i}" for i in range(1, RUNS, 3)
    }
    outbox = _ids_by_shard(storage, keys.outbox_partition, lambda s: keys.dec(s.split("#")[1]))
    assert outbox == _expected(CHOSEN["outbox"])
    assert storage.marker_reads == 2  # the check before the write, and none after it
    engine.close()

    again = MarkerReads(storage_factory())
    reopened = _open(again, clock)  # no choice: the store's counts
    assert reopened.runtime.shards == COUNTS
    assert len(reopened.list(status="completed")) == RUNS
    reopened.run_maintenance()
    assert again.marker_reads == 1  # read once, when the engine opened the store
    reopened.close()


def test_an_idle_pass_reads_each_chosen_timer_shard_once(storage_factory: Opener) -> None:
    storage = storage_factory()
    engine = Engine.create(
        storage, {"order": ORDER}, background_tasks="manual", recover=False, shards={"timers": 9}
    )
    storage.stats.reset()
    engine.run_maintenance()
    stats = storage.stats.snapshot()
    assert stats["scans"] == 9
    assert stats["requests"] <= 9 + 5  # ADR 0039's idle bound, with this store's count
    engine.close()


def test_a_store_without_a_marker_keeps_the_default_layout_and_gains_no_write(
    storage_factory: Opener,
) -> None:
    storage = storage_factory()
    engine = _open(storage, VirtualClock())
    assert engine.runtime.shards == keys.DEFAULT_SHARDS
    assert storage.get(keys.meta_key(keys.LAYOUT)) is None
    engine.start("order", id="old")
    assert keys.timer_partition(keys.shard_of("old", 4)) in {
        key.partition for key in _timer_keys(storage, 4)
    }
    engine.close()


def _timer_keys(storage: Storage, count: int) -> list[Key]:
    return [
        Key(keys.timer_partition(s), sort)
        for s in range(count)
        for sort, _ in storage.scan(keys.timer_partition(s))
    ]


@pytest.mark.parametrize(
    ("shards", "said"),
    [
        ({"timers": 0}, "from 1 to 256"),
        ({"timers": 257}, "from 1 to 256"),
        ({"timers": True}, "whole number"),
        ({"timers": "8"}, "whole number"),
        ({"timer": 8}, "unknown index"),
        ([("timers", 8)], "a mapping"),
    ],
)
def test_a_bad_choice_is_refused_before_anything_is_written(
    storage_factory: Opener, shards: Any, said: str
) -> None:
    storage = storage_factory()
    with pytest.raises(ConfigurationError, match=said):
        _open(storage, VirtualClock(), shards=shards)
    assert storage.stats.snapshot()["requests"] == 0


def test_a_store_keeps_the_counts_it_was_created_with(storage_factory: Opener) -> None:
    storage = storage_factory()
    _open(storage, VirtualClock(), shards={"timers": 8}).close()
    storage.stats.reset()
    with pytest.raises(ConfigurationError, match="created with"):
        _open(storage, VirtualClock(), shards={"timers": 16})
    assert storage.stats.snapshot()["items_written"] == 0
    same = _open(storage, VirtualClock(), shards={"timers": 8})  # its own counts: fine
    assert same.runtime.shards.timers == 8
    same.close()


def test_a_store_holding_runs_without_a_marker_refuses_other_counts(
    storage_factory: Opener,
) -> None:
    storage = storage_factory()
    old = _open(storage, VirtualClock())
    old.start("order", id="before")
    old.close()
    storage.stats.reset()
    with pytest.raises(ConfigurationError, match="already holds index items"):
        _open(storage, VirtualClock(), shards={"timers": 8})
    assert storage.stats.snapshot()["items_written"] == 0
    assert storage.get(keys.meta_key(keys.LAYOUT)) is None
    default = _open(storage, VirtualClock(), shards={})  # the counts it has: recorded
    assert default.runtime.shards == keys.DEFAULT_SHARDS
    assert storage.get(keys.meta_key(keys.LAYOUT)) is not None
    default.close()


@pytest.mark.parametrize("crash", ["before", "after"])
def test_a_crash_at_the_marker_write_leaves_one_layout_or_none(
    storage_factory: Opener, crash: str
) -> None:
    """The marker is the creation's only write: a crash before it leaves an untouched store,
    one after it a store with the chosen counts; either way the next open settles it."""
    inner = storage_factory()
    crashing = CrashingStorage(
        inner,
        crash_before_write=1 if crash == "before" else None,
        crash_after_write=1 if crash == "after" else None,
    )
    with pytest.raises(SimulatedCrash):
        _open(crashing, VirtualClock(), shards={"timers": 8})
    assert (inner.get(keys.meta_key(keys.LAYOUT)) is None) == (crash == "before")
    if crash == "after":
        with pytest.raises(ConfigurationError, match="created with"):
            _open(inner, VirtualClock(), shards={"timers": 16})
    engine = _open(inner, VirtualClock(), shards={"timers": 8})
    assert engine.runtime.shards.timers == 8
    engine.close()


class Interleaved(DelegatingStorage):
    """Lets ``other`` run right after this storage first reads the marker (absent)."""

    def __init__(self, inner: Storage, other: Any) -> None:
        super().__init__(inner)
        self.other = other

    def _get(self, key: Key) -> bytes | None:
        value = super()._get(key)
        if key == keys.meta_key(keys.LAYOUT) and self.other is not None:
            other, self.other = self.other, None
            other()
        return value


@pytest.mark.parametrize("same", [True, False])
def test_two_engines_creating_one_store_agree_on_one_layout(
    storage_factory: Opener, same: bool
) -> None:
    inner = storage_factory()
    first = keys.ShardCounts(timers=8)
    second = first if same else keys.ShardCounts(timers=16)
    won: list[keys.ShardCounts] = []

    def racer() -> None:
        won.append(shard_layout.open_shards(inner, first, 0.0, STATUSES))

    racing = Interleaved(inner, racer)
    if same:
        assert shard_layout.open_shards(racing, second, 0.0, STATUSES) == first
    else:
        with pytest.raises(ConfigurationError, match="created with"):
            shard_layout.open_shards(racing, second, 0.0, STATUSES)
    assert won == [first]
    assert shard_layout.read_shards(inner) == first
