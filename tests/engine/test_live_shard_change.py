"""Changing a live store's shard counts (ADR 0050): engines re-read the marker on a bound,
the change moves through its phases only after every engine has seen the previous one, and
at the end every index entry sits exactly once where the new counts put it, with no timer,
claim or entry stranded, under traffic, a crash at any write, and a writer racing a move."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest
from engine_helpers import ORDER, FixedSink, Opener

from weft_serverless import ConfigurationError, Engine, MemoryStorage, WorkflowContext, workflow
from weft_serverless.engine.persistence import index_entries
from weft_serverless.engine.persistence.records import STATUSES, WorkflowState
from weft_serverless.errors import StorageError
from weft_serverless.storage import keys, shard_layout, shard_migration
from weft_serverless.storage.base import Condition, Key, Op, Storage
from weft_serverless.testing import CrashingStorage, DelegatingStorage, SimulatedCrash, VirtualClock

REFRESH = 10.0
LONGEST = 20.0
SETTLE = REFRESH + LONGEST
SMALL = {"timers": 2, "status": 2, "claims": 2, "visibility": 2, "outbox": 2}
LARGE = {"timers": 7, "status": 5, "claims": 6, "visibility": 8, "outbox": 3}
BEYOND = 12  # every partition scanned, past every count, to see nothing stays there
NAMES = ("customer",)


def _open(storage: Storage, clock: VirtualClock, **options: Any) -> Engine:
    options.setdefault("shards_refresh", REFRESH)
    return Engine.create(
        storage,
        {"order": ORDER},
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        recover=False,
        events=FixedSink(accept=True),
        **options,
    )


def _start(engine: Engine, run_id: str, index: int) -> None:
    with engine.invocation():
        engine.start(
            "order",
            id=run_id,
            search_attributes={"customer": f"c{index % 3}"},
            tags=["vip"] if index % 2 else ["vip", "new"],
        )


# -- what the store holds ---------------------------------------------------------------------


def _families() -> list[Callable[[int], str]]:
    """One function per sharded index partition family (shard -> partition)."""
    families: list[Callable[[int], str]] = [
        (lambda shard, status=status: keys.status_partition(status, shard)) for status in STATUSES
    ]
    families.append(keys.tag_partition)
    families += [(lambda shard, name=name: keys.attribute_partition(name, shard)) for name in NAMES]
    families.append(keys.claim_partition)
    return families


def _index_items(storage: Storage) -> list[Key]:
    """Every status, tag, attribute and claim item, in every shard up to ``BEYOND``."""
    return [
        Key(family(shard), sort)
        for family in _families()
        for shard in range(BEYOND)
        for sort, _ in storage.scan(family(shard))
    ]


def _family_of(key: Key) -> tuple[str, str]:
    """An item's index and sort key without its shard: the same item in either layout."""
    return key.partition.rsplit("#", 1)[0], key.sort


def _state(storage: Storage, run_id: str) -> WorkflowState:
    data = storage.get(keys.state_key(run_id))
    assert data is not None
    return WorkflowState.from_bytes(data)


def _assert_laid_out(storage: Storage, counts: keys.ShardCounts, run_ids: set[str]) -> None:
    """Every run's entries exactly once, each where ``counts`` puts it, nothing else; every
    claim item in its shard under ``counts``, once."""
    found = _index_items(storage)
    claims = [key for key in found if key.partition.startswith("claims#")]
    entries = sorted((key for key in found if key not in claims), key=str)
    expected = sorted(
        (key for wf in run_ids for key in index_entries.entries(counts, _state(storage, wf))),
        key=str,
    )
    assert entries == expected
    claimed = [keys.dec(key.sort) for key in claims]
    assert len(claimed) == len(set(claimed))
    assert all(key == keys.claim_index_key(counts, keys.dec(key.sort)) for key in claims)


def _timer_items(storage: Storage) -> list[Key]:
    return [
        Key(keys.timer_partition(shard), sort)
        for shard in range(BEYOND)
        for sort, _ in storage.scan(keys.timer_partition(shard))
    ]


# -- a live change under traffic -----------------------------------------------------------------


class Traffic:
    """Runs started, parked on a sleep, fired, signalled to the end, by two engines in turn,
    with every listing checked against what was done."""

    def __init__(self, engines: list[Engine], clock: VirtualClock) -> None:
        self.engines, self.clock = engines, clock
        self.status: dict[str, str] = {}
        self.index: dict[str, int] = {}
        self.waves = itertools.count()

    def wave(self) -> None:
        wave = next(self.waves)
        engine = self.engines[wave % len(self.engines)]
        other = self.engines[(wave + 1) % len(self.engines)]
        ready = [wf for wf, status in self.status.items() if status == "waiting"]
        for i in range(3):
            run_id = f"w{wave}-{i}"
            self.index[run_id] = len(self.index)
            _start(engine, run_id, self.index[run_id])
            self.status[run_id] = "sleeping"
        self.check()
        self.clock.advance(6.0)
        other.run_maintenance()  # fires the sleeps: those runs now wait for the signal
        for wf, status in list(self.status.items()):
            if status == "sleeping":
                self.status[wf] = "waiting"
        with engine.invocation():
            for wf in ready:
                engine.signal(wf, "ship")
                self.status[wf] = "completed"
        self.check()

    def check(self) -> None:
        """Every listing finds every run once, during every phase, from either engine."""
        for engine in self.engines:
            running = [s.id for s in engine.list(status="running", limit=1000)]
            completed = [s.id for s in engine.list(status="completed", limit=1000)]
            done = {wf for wf, status in self.status.items() if status == "completed"}
            assert sorted(completed) == sorted(done)
            assert sorted(running) == sorted(set(self.status) - done)
            assert sorted(s.id for s in engine.list(tags=["vip"], limit=1000)) == sorted(
                self.status
            )
            newcomers = {wf for wf, index in self.index.items() if index % 2 == 0}
            assert sorted(s.id for s in engine.list(tags=["new"], limit=1000)) == sorted(newcomers)
            c1 = {wf for wf, index in self.index.items() if index % 3 == 1}
            listed = [s.id for s in engine.list(where={"customer": "c1"}, limit=1000)]
            assert sorted(listed) == sorted(c1)

    def finish(self) -> None:
        """Fire what sleeps and signal every run to its end."""
        self.clock.advance(6.0)
        self.engines[0].run_maintenance()
        with self.engines[0].invocation():
            for wf in self.status:
                if self.status[wf] != "completed":
                    self.engines[0].signal(wf, "ship")
                    self.status[wf] = "completed"
        for engine in self.engines:  # a wake left to the engine that holds the run
            self.clock.advance(1.0)
            engine.run_maintenance()
        self.check()


@pytest.mark.parametrize(
    ("before", "after"), [(SMALL, LARGE), (LARGE, SMALL)], ids=["grow", "shrink"]
)
def test_a_live_change_under_traffic_leaves_every_entry_once_in_the_new_layout(
    storage_factory: Opener, before: dict[str, int], after: dict[str, int]
) -> None:
    clock = VirtualClock()
    storage = storage_factory()
    changer = _open(storage, clock, shards=before)
    other = _open(storage_factory(), clock)  # another engine on the store, its own copy
    traffic = Traffic([changer, other], clock)
    traffic.wave()

    phases, moved = [], 0
    for _ in range(12):
        change = changer.change_shards(after, wait=False, longest_invocation=LONGEST)
        phases.append(change.phase)
        moved += change.moved
        traffic.wave()
        if change.done:
            break
        changer.run_maintenance()  # a shrink waits for its old timer shards to empty
        clock.advance(SETTLE)
    assert change.done and change.counts == after
    assert phases[:2] == ["deleting under both", "writing new"]
    assert moved > 0  # the runs started before the change were moved, not rewritten
    assert shard_layout.read_shards(storage) == keys.ShardCounts(**after)
    traffic.wave()
    traffic.finish()

    _assert_laid_out(storage, keys.ShardCounts(**after), set(traffic.status))
    assert all(
        int(key.partition.rsplit("#", 1)[1]) < after["timers"] for key in _timer_items(storage)
    )
    assert {changer.get_handle(wf).result() for wf in traffic.status} == {"shipped"}
    changer.close()
    other.close()


# -- a crash at every write of the procedure and of the pass ---------------------------------


def _seeded(before: dict[str, int]) -> tuple[MemoryStorage, VirtualClock, set[str]]:
    """A store under ``before`` holding runs in every state the pass moves: completed,
    waiting for a signal (claimed) and sleeping, each with tags and an attribute."""
    storage, clock = MemoryStorage(), VirtualClock()
    engine = _open(storage, clock, shards=before)
    runs = {f"r{i}" for i in range(6)}
    for i, wf in enumerate(sorted(runs)):
        _start(engine, wf, i)
        if i == 1:
            clock.advance(6.0)
            engine.run_maintenance()
    with engine.invocation():
        engine.signal("r0", "ship")
    engine.close()
    return storage, clock, runs


def _change(
    storage: Storage,
    clock: VirtualClock,
    after: dict[str, int],
    maintain: Engine | None = None,
) -> None:
    """The procedure to its end, as ``Engine.change_shards`` runs it, on virtual time, with
    ``maintain`` firing timers meanwhile (a shrink waits for its old timer shards)."""
    target = keys.ShardCounts(**after)
    for _ in range(10):
        change = shard_migration.advance(storage, target, clock(), SETTLE, STATUSES)
        if change.done:
            return
        assert change.next_at is not None
        clock.advance(max(0.0, change.next_at - clock()))
        if maintain is not None:
            maintain.run_maintenance()
    raise AssertionError("the change did not finish")


@pytest.mark.parametrize(
    ("before", "after"), [(SMALL, LARGE), (LARGE, SMALL)], ids=["grow", "shrink"]
)
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_any_write_of_the_change_leaves_each_item_in_one_place_and_a_rerun_finishes(
    before: dict[str, int], after: dict[str, int], when: str
) -> None:
    storage, clock, runs = _seeded(before)
    items = sorted(map(_family_of, _index_items(storage)))
    crashing = CrashingStorage(storage)
    _change(crashing, clock, after, _open(storage, clock))
    writes = crashing.writes
    assert writes >= 4  # three marker writes and at least one move

    for write in range(1, writes + 1):
        storage, clock, runs = _seeded(before)
        crashing = CrashingStorage(
            storage,
            crash_before_write=write if when == "before" else None,
            crash_after_write=write if when == "after" else None,
        )
        maintain = _open(storage, clock)  # fires timers on the store, beside the change
        with pytest.raises(SimulatedCrash):
            _change(crashing, clock, after, maintain)
        # never both, never neither: each item once, in the old layout or the new
        assert sorted(map(_family_of, _index_items(storage))) == _fired(items, storage)
        _change(storage, clock, after, maintain)  # the rerun carries on from the marker's phase
        assert shard_layout.read_marker(storage) is not None
        _assert_laid_out(storage, keys.ShardCounts(**after), runs)
        reopened = _open(storage, clock)
        assert reopened.runtime.shards == keys.ShardCounts(**after)
        assert len(reopened.list(tags=["vip"], limit=100)) == len(runs)
        reopened.close()
        maintain.close()


def _fired(items: list[tuple[str, str]], storage: Storage) -> list[tuple[str, str]]:
    """``items`` as the runs' own progress left them: a run whose sleep fired meanwhile
    holds its claim (once), as it did before the change; the pass itself adds or drops
    nothing."""
    claims = sorted(
        _family_of(key) for key in _index_items(storage) if key.partition.startswith("claims#")
    )
    return sorted([item for item in items if item[0] != "claims"] + claims)


# -- the bound on stale copies ---------------------------------------------------------------


class MarkerReads(DelegatingStorage):
    """Counts reads of the marker; ``fail`` makes them raise, as an unreachable store."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.marker_reads = 0
        self.fail = False

    def _get(self, key: Key) -> bytes | None:
        if key == keys.meta_key(keys.LAYOUT):
            self.marker_reads += 1
            if self.fail:
                raise StorageError("the store cannot be reached")
        return super()._get(key)


def test_an_engine_whose_copy_is_older_than_the_bound_reads_again_before_an_index_write(
    storage_factory: Opener,
) -> None:
    clock = VirtualClock()
    changer = _open(storage_factory(), clock, shards=SMALL)
    watched = MarkerReads(storage_factory())
    stale = _open(watched, clock)
    assert watched.marker_reads == 1
    _start(stale, "fresh", 0)
    assert watched.marker_reads == 1  # a copy younger than the bound is used as it is

    changer.change_shards(LARGE, wait=False, longest_invocation=LONGEST)
    clock.advance(SETTLE)
    changer.change_shards(LARGE, wait=False, longest_invocation=LONGEST)  # writers write M
    new, old = keys.ShardCounts(**LARGE), keys.ShardCounts(**SMALL)
    _start(stale, "late", 1)  # its copy (phase 0) is SETTLE old: it reads the marker first
    assert watched.marker_reads == 2
    state = _state(watched, "late")
    assert watched.get(keys.status_key(new, "running", "late", state.created_at)) is not None
    if keys.shard_of("late", new.status) != keys.shard_of("late", old.status):
        assert watched.get(keys.status_key(old, "running", "late", state.created_at)) is None
    found = [key for key in _index_items(watched) if key.sort.endswith(keys.enc("late"))]
    assert sorted(found, key=str) == sorted(index_entries.entries(new, state), key=str)

    clock.advance(REFRESH)
    watched.fail = True  # the bound passed and the marker cannot be read: nothing is written
    before = watched.stats.snapshot()["items_written"]
    with pytest.raises(StorageError, match="cannot be reached"):
        _start(stale, "refused", 2)
    assert watched.stats.snapshot()["items_written"] == before
    assert watched.get(keys.state_key("refused")) is None
    watched.fail = False
    _start(stale, "refused", 2)  # the next ask reads again
    changer.close()
    stale.close()


def test_a_plain_step_never_reads_the_marker(storage_factory: Opener) -> None:
    steps = workflow("steps").activities(one=_one).execute(_three_steps)
    clock = VirtualClock()
    watched = MarkerReads(storage_factory())
    engine = Engine.create(
        watched, {"steps": steps}, background_tasks="manual", clock=clock, shards_refresh=REFRESH
    )
    reads = watched.marker_reads
    clock.advance(REFRESH * 3)
    with engine.invocation():
        handle = engine.start("steps", id="s")
    assert handle.result() == 3
    # the start writes index items (one read, its copy being old); the steps read nothing
    assert watched.marker_reads == reads + 1
    engine.close()


def _one() -> int:
    return 1


def _three_steps(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, int]:
    total = 0
    for _ in range(3):
        total += yield ctx.run("one")
    return total


# -- a writer racing a move --------------------------------------------------------------------


class RaceAtMove(DelegatingStorage):
    """Runs ``writer(run_id)`` just before (or just after) the pass's first move of a
    running status entry: the pass holds that entry as it read it."""

    def __init__(self, inner: Storage, writer: Callable[[str], None], after: bool) -> None:
        super().__init__(inner)
        self.writer: Callable[[str], None] | None = writer
        self.after = after
        self.raced: str | None = None

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        move = (
            len(conditions) == 2
            and conditions[0].key.partition.startswith("status#running#")
            and conditions[1].expected is None
        )
        writer = self.writer if move else None
        run_id = keys.status_entry_id(conditions[0].key.sort) if move else ""
        if writer is not None and not self.after:
            self.writer, self.raced = None, run_id
            writer(run_id)
        applied = super()._conditional_batch(conditions, ops)
        if writer is not None and self.after:
            self.writer, self.raced = None, run_id
            writer(run_id)
        return applied


@pytest.mark.parametrize("after", [False, True], ids=["writer-first", "move-first"])
def test_a_writer_ending_a_run_while_its_entry_moves_leaves_one_entry(
    storage_factory: Opener, after: bool
) -> None:
    clock = VirtualClock()
    storage = storage_factory()
    engine = _open(storage, clock, shards=SMALL)
    runs = {f"m{i}" for i in range(8)}
    for i, wf in enumerate(sorted(runs)):
        _start(engine, wf, i)
    clock.advance(6.0)
    engine.run_maintenance()  # every run waits for its signal

    def end(run_id: str) -> None:
        with engine.invocation():
            engine.signal(run_id, "ship")

    racing = RaceAtMove(storage, end, after)
    _change(racing, clock, LARGE)
    assert racing.raced is not None
    _assert_laid_out(storage, keys.ShardCounts(**LARGE), runs)
    assert engine.get_handle(racing.raced).result() == "shipped"
    completed = [s.id for s in engine.list(status="completed")]
    assert completed == [racing.raced]
    assert len(engine.list(status="running")) == len(runs) - 1
    engine.close()


# -- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shards", "said"),
    [
        ({"timers": 0}, "from 1 to 256"),
        ({"claims": 257}, "from 1 to 256"),
        ({"status": "8"}, "whole number"),
        ({"timer": 8}, "unknown index"),
        ([("timers", 8)], "a mapping"),
    ],
)
def test_bad_counts_are_refused_before_anything_is_written(
    storage_factory: Opener, shards: Any, said: str
) -> None:
    storage = storage_factory()
    engine = _open(storage, VirtualClock(), shards=SMALL)
    storage.stats.reset()
    with pytest.raises(ConfigurationError, match=said):
        engine.change_shards(shards, wait=False)
    assert storage.stats.snapshot()["items_written"] == 0
    engine.close()


def test_a_second_change_waits_for_the_first_and_settings_are_checked(
    storage_factory: Opener,
) -> None:
    storage = storage_factory()
    clock = VirtualClock()
    engine = _open(storage, clock, shards=SMALL)
    with pytest.raises(ConfigurationError, match="0 or more"):
        engine.change_shards(LARGE, longest_invocation=-1.0)
    with pytest.raises(ConfigurationError, match="shards_refresh"):
        _open(storage, clock, shards_refresh=0)
    first = engine.change_shards({"timers": 8}, wait=False, longest_invocation=LONGEST)
    assert first.pending == {**SMALL, "timers": 8} and first.next_at == clock() + SETTLE
    storage.stats.reset()
    with pytest.raises(ConfigurationError, match="under way"):
        engine.change_shards({"timers": 16}, wait=False)
    assert storage.stats.snapshot()["items_written"] == 0
    again = engine.change_shards({"timers": 8}, wait=False)  # the same change: carries on
    assert again.phase == "deleting under both" and again.next_at == first.next_at
    done = engine.change_shards(wait=True, sleep=clock.advance)  # no counts: the one under way
    assert done.done and done.counts == {**SMALL, "timers": 8}
    assert engine.runtime.shards.timers == 8
    assert engine.change_shards({"timers": 8}).done  # nothing left to do
    engine.close()
