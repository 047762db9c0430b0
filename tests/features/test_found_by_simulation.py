"""Defects the deterministic simulation found, each pinned by a plain test.

Each test names the invariant that caught it; the seed and the shrunk replay line are in
docs/decisions/0047-simulation-covers-the-engine.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from feature_support import KeyCrash, expect_crash, puts_op

from weft_serverless import (
    BulkOperation,
    Concurrency,
    Engine,
    EngineLeaseLostError,
    MemoryStorage,
    WorkflowWakeDiscarded,
    current_activity,
    workflow,
)
from weft_serverless.codec import decode
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.engine.persistence.run_head import holder_record
from weft_serverless.engine.runs import control
from weft_serverless.errors import StorageUnavailableError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Key, Op, SortRange
from weft_serverless.testing import (
    CrashingStorage,
    DelegatingStorage,
    SimulatedCrash,
    TestEngine,
    VirtualClock,
)


def test_a_run_continued_after_an_async_activity_is_driven_again() -> None:
    """``unexpected-errors``: the async attempt's pending record (``pend#<slot>@<n>``) is
    set aside at the continue like every record of the run before; its slot reference was
    read as a step number, so every later drive of the new run raised ``ValueError``."""
    tokens: list[str] = []

    def ask(_: Any) -> None:
        tokens.append(current_activity().complete_async())

    def body(ctx: Any, spec: dict[str, int]) -> Any:
        if spec["round"] == 0:
            answer = yield ctx.run("ask", 1)
            yield ctx.continue_as_new({"round": 1, "answer": answer})
        yield ctx.sleep(1)
        return spec

    te = TestEngine({"asker": workflow("asker").activities(ask=ask).execute(body)})
    te.start("asker", {"round": 0}, id="a-1")
    te.complete_activity(tokens[0], "yes")
    te.advance(1)
    description = te.describe("a-1")
    assert (description.status, description.run) == ("completed", 2)
    assert description.result == {"round": 1, "answer": "yes"}


def _crash_after_the_start(body: Any) -> tuple[TestEngine, MemoryStorage]:
    """A run whose process died right after its start landed: it keeps its wake-up."""
    store = MemoryStorage()
    flows = {"job": workflow("job").activities(work=lambda: None).execute(body)}
    te = TestEngine(flows, storage=CrashingStorage(store, crash_after_write=1), recover=False)
    with pytest.raises(SimulatedCrash):
        te.start("job", id="j-1")
    te.crash()
    te.recover(store)
    assert store.get(keys.wake_key("j-1")) is not None
    return te, store


def _waits(ctx: Any, _: Any) -> Any:
    yield ctx.run("work")
    yield ctx.wait_for_signal("go")


@pytest.mark.parametrize("end", ["cancel", "time-out"])
def test_a_run_ended_from_outside_keeps_no_wake_up(end: str) -> None:
    """``terminal-leaves-nothing``: a cancel or a time-out (a move from outside, which reads
    no history) left the run's wake-up pointer for ever, and its timer until a pass fired
    it on a finished run; the terminal batch now deletes both."""
    te, store = _crash_after_the_start(_waits)
    if end == "cancel":
        te.cancel("j-1")
    else:
        assert te.engine.runtime is not None
        assert control.time_out(te.engine.runtime, "j-1")
    assert te.describe("j-1").status == ("cancelled" if end == "cancel" else "timed-out")
    assert store.get(keys.wake_key("j-1")) is None
    timers = [
        decode(value)
        for shard in range(keys.TIMER_SHARDS)
        for _, value in store.scan(keys.timer_partition(shard))
    ]
    assert [t for t in timers if t["wf"] == "j-1" and t["kind"] == "wake"] == []


def _done(ctx: Any, _: Any) -> Any:
    yield ctx.run("work")
    return "done"


def test_a_purge_by_an_engine_that_lost_the_lease_deletes_nothing() -> None:
    """``no-deposed-writes`` (lease): a purge deletes the state in a fenced batch, then the
    rest of the partition in chunks that carried no fence, so an engine that had lost the
    store-wide lease (here: repeating a purge a crash cut short) still deleted records."""
    store, clock = MemoryStorage(), VirtualClock()
    flows = {"job": workflow("job").activities(work=lambda: 1).execute(_done)}
    options: dict[str, Any] = {
        "ownership": "lease",
        "lease_ttl": 3.0,
        "lease_renew_interval": 1.0,
        "background_tasks": "manual",
        "clock": clock,
    }
    crashing = CrashingStorage(store)
    first = Engine.create(crashing, flows, engine_id="first", **options)
    first.start("job", id="j-1")
    crashing.crash_after_write = crashing.writes + 1
    with pytest.raises(SimulatedCrash):
        first.purge("j-1")  # the state is gone; the rest of the partition is left
    left = list(store.scan(keys.workflow_partition("j-1")))
    assert [sort for sort, _ in left] == ["op#00000000"]
    clock.advance(10.0)
    Engine.create(store, flows, engine_id="second", **options)  # takes the expired lease
    with pytest.raises(EngineLeaseLostError), pytest.warns(RuntimeWarning, match="lost"):
        first.purge("j-1")
    assert list(store.scan(keys.workflow_partition("j-1"))) == left


class _CrashAfterNextWrite(DelegatingStorage):
    """Once armed, dies right after the next write lands."""

    def __init__(self, inner: MemoryStorage) -> None:
        super().__init__(inner)
        self.armed = False

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        landed = super()._conditional_batch(conditions, ops)
        if self.armed:
            self.armed = False
            raise SimulatedCrash("crash right after the write")
        return landed


def test_a_step_that_heartbeated_takes_its_heartbeat_record_with_it() -> None:
    """``heartbeats-carry-over``: an activity step's heartbeat record was deleted by a
    cleanup write after the step's commit (on the run's head, a single put), so a crash
    between the two left the finished step's heartbeat for good; its delete now lands in
    the step's own batch."""
    store = MemoryStorage()
    crashing = _CrashAfterNextWrite(store)

    def beat() -> str:
        current_activity().heartbeat("half-way")
        crashing.armed = True  # the next write is the step's commit
        return "beaten"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("beat", heartbeat_timeout=30))

    flows = {"hb": workflow("hb").activities(beat=beat).execute(body)}
    te = TestEngine(flows, storage=crashing, ownership="workflow-lease")
    with pytest.raises(SimulatedCrash):
        te.start("hb", id="h-1")
    te.crash()
    with pytest.warns(WorkflowWakeDiscarded):  # the dead engine's claim is still live
        te.recover(store)
    te.advance(120)  # the dead engine's claim expires; the run is taken over and finishes
    assert te.describe("h-1").result == "beaten"
    assert list(store.scan(keys.workflow_partition("h-1"), keys.HEARTBEAT_PREFIX)) == []


def _waits_for_go(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("go"))


def test_a_bulk_operation_stopped_twice_at_one_instant_keeps_its_timer() -> None:
    """``bulk-operations-finish-exactly``: an operation out of time stops at a page boundary
    with its timer due now; a pass continuing it at that same instant, out of time too,
    re-armed the timer under the key it was firing, which the pass then deleted: the
    operation was stranded ``running`` for good."""
    te = TestEngine({"order": workflow("order").execute(_waits_for_go)})
    for n in range(4):
        te.start("order", id=f"o-{n}")
    engine = te.engine
    preview = engine.signal_all("go", 1, dry_run=True, status="running")
    with engine.invocation(time_left=lambda: 0.0):
        first = engine.signal_all("go", 1, confirm=preview.token, page_size=1, status="running")
    assert isinstance(first, BulkOperation) and first.status == "running"
    with engine.invocation(time_left=lambda: 0.0):
        engine.run_maintenance()  # the same instant: one more page, then it stops again
    for _ in range(4):
        te.advance(60)
    assert engine.describe_bulk(first.id).status == "completed"
    assert engine.describe_bulk(first.id).done == 4


def test_a_schedule_fire_due_by_the_millisecond_fires() -> None:
    """``unexpected-errors``: a pass below a fire's time by float rounding (well under a
    millisecond: engine clocks add offsets) found its timer due, as timers compare whole
    milliseconds, but looked for due fires by the exact time, found none, and raised
    ``AssertionError`` out of ``run_maintenance``."""
    fire = 1_767_225_607.0  # a multiple of 7 s: a fire of every="7s"
    clock = VirtualClock(fire - 3.0)
    te = TestEngine({"job": workflow("job").execute(_done_at_once)}, clock=clock)
    te.engine.schedule("every-7", "job", every=7.0)
    assert te.engine.get_schedule("every-7").describe().next_fire_at == fire
    clock.advance(3.0 - 5e-7)  # half a microsecond before the fire: float rounding
    te.run_maintenance()
    assert te.describe("every-7-20260101T000007Z").status == "completed"


def _done_at_once(ctx: Any, _: Any) -> Any:
    return "done"
    yield


def _race_then_work(ctx: Any, _: Any) -> Any:
    index, _value = yield ctx.race(ctx.run("quick"), ctx.sleep(600))
    yield ctx.run("after")
    return index


def test_a_race_an_activity_won_leaves_the_run_a_way_forward() -> None:
    """``liveness``: a race's sleep branch parked first and its batch took the run's
    wake-up with it; then the activity branch won and the race's commit deleted the losing
    sleep's timer, so a crash right after left a running run with nothing to drive it. A
    branch's park now keeps the wake-up; the drive drops it once the run parks."""
    store = MemoryStorage()
    crashing = KeyCrash(store)
    flows = {
        "racer": workflow("racer")
        .activities(quick=lambda: "won", after=lambda: "next")
        .execute(_race_then_work)
    }
    te = TestEngine(flows, storage=crashing, recover=False)
    crashing.arm(puts_op("r-1", 0))  # crash right after the race's commit
    with expect_crash():
        te.start("racer", id="r-1")
    te.crash()
    te.recover(store)
    te.advance(61)  # past the wake-up's grace
    assert te.describe("r-1").result == 0


def test_a_resumed_run_keeps_one_wake_up() -> None:
    """``terminal-leaves-nothing``: a resume arms a wake-up for the drive it starts; it
    left the one stored already behind (its pointer overwritten), to wake the run for
    nothing, or to outlive its end."""
    te, store = _crash_after_the_start(_waits)
    te.suspend("j-1")
    te.advance(1.0)  # the new wake-up is due later than the stored one
    te.resume("j-1")  # drives it: it parks on its signal
    assert te.describe("j-1").status == "running"
    timers = [
        decode(value)
        for shard in range(keys.TIMER_SHARDS)
        for _, value in store.scan(keys.timer_partition(shard))
    ]
    assert [t["kind"] for t in timers if t["wf"] == "j-1"] == []


def _holds_its_slot(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("done"))


def _starts_a_limited_child(ctx: Any, _: Any) -> Any:
    child = yield ctx.start_child("limited", None, id="kid", parent_close_policy="abandon")
    got = yield ctx.wait_for_signal("go")
    return [child, got]


@pytest.mark.filterwarnings("ignore::weft_serverless.WorkflowWakeDiscarded")
def test_a_step_committed_again_after_a_retry_outranks_the_head_s_old_one() -> None:
    """``liveness``: a failed step committed on the run's head, forgotten by ``retry`` and
    committed again by a batch (a child's start) left the head naming the old failed record;
    readers took the head's record over the slot's newer item, so a fresh engine replayed
    the failure and failed the run again."""
    limited = workflow("limited", concurrency=Concurrency(1, on_limit="reject"))
    flows = {
        "limited": limited.execute(_holds_its_slot),
        "parent": workflow("parent").execute(_starts_a_limited_child),
    }
    te = TestEngine(flows, ownership="workflow-lease")
    te.start("limited", id="holder")  # takes the only slot
    te.start("parent", id="p-1")  # its child is rejected: the run fails
    assert te.describe("p-1").status == "failed"
    te.signal("holder", "done", None)  # the slot frees
    te.retry("p-1")  # the child starts now, in the batch that records the step again
    assert te.describe("p-1").status == "running"
    te.crash()
    te.recover()  # a fresh engine: it replays the run from the store once it claims it
    te.signal("p-1", "go", 1)
    te.advance(120)  # the dead engine's claims expire and are taken over
    assert te.describe("p-1").result == ["kid", 1]


class _BusyOnce(DelegatingStorage):
    """The first read of a concurrency key's slots finds the store unavailable."""

    def __init__(self, inner: MemoryStorage) -> None:
        super().__init__(inner)
        self.busy = True

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        if self.busy and partition.startswith("conc#"):
            self.busy = False
            raise StorageUnavailableError("the store did not answer")
        return super()._scan(partition, rng, limit, reverse)


def test_a_child_start_the_store_did_not_answer_is_tried_again() -> None:
    """``failures-are-planned``: a transient storage error while a child's start read its
    concurrency key was recorded as the child failing to start, so the parent failed for
    good; it now fails the drive, and the run's wake-up starts the child later."""
    limited = workflow("limited", concurrency=Concurrency(1, on_limit="reject"))
    flows = {
        "limited": limited.execute(_holds_its_slot),
        "parent": workflow("parent").execute(_starts_a_limited_child),
    }
    store = MemoryStorage()
    te = TestEngine(flows, storage=_BusyOnce(store))
    te.start("parent", id="p-1")  # the drive fails; the start stands
    te.advance(61)  # the wake-up's grace
    te.signal("p-1", "go", 2)
    assert te.describe("p-1").result == ["kid", 2]


def _works(ctx: Any, _: Any) -> Any:
    return (yield ctx.run("work"))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_an_engine_whose_lease_lapsed_runs_no_activity() -> None:
    """``activity-runs-once-more-than-faults`` (lease): an engine that had not renewed the
    store-wide lease for longer than it lasts (another engine holds the store by then)
    drove a run and ran its activity before its first write found the lease lost; it now
    renews a lease that may have lapsed before an activity, and stops when refused."""
    store, clock = MemoryStorage(), VirtualClock()
    ran: list[str] = []
    work = workflow("job").activities(work=lambda: ran.append("work"))
    flows = {"job": work.execute(_works)}
    options: dict[str, Any] = {
        "ownership": "lease",
        "lease_ttl": 3.0,
        "lease_renew_interval": 1.0,
        "background_tasks": "manual",
        "clock": clock,
    }
    first = Engine.create(store, flows, engine_id="first", **options)
    with first.invocation(time_left=lambda: 0.0):  # no time: the step waits for later
        first.start("job", id="j-1")
    clock.advance(10.0)  # nothing renewed the lease: it lapsed
    Engine.create(store, flows, engine_id="second", recover=False, **options)  # takes it
    with pytest.raises(EngineLeaseLostError):
        first.resume("j-1")  # a drive with no write before the activity
    assert ran == []


def _waits_for_its_child(ctx: Any, _: Any) -> Any:
    yield ctx.wait_for_signal("go")
    return (yield ctx.start_child("kid", None, id="p-1.kid"))


def _kid(ctx: Any, _: Any) -> Any:
    return (yield ctx.wait_for_signal("never"))


class _AtTheFinalizersRead(DelegatingStorage):
    """Calls ``hook`` once, right after a scan of ``p-1``'s finalizer registrations: a move
    from outside reads them after the run's children, and before its owner records."""

    def __init__(self, inner: MemoryStorage, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.hook, self.called = hook, False

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        rows = list(super()._scan(partition, rng, limit, reverse))
        prefix = rng.low or ""
        ours = partition == keys.workflow_partition("p-1")
        if not self.called and ours and prefix.startswith(keys.FINALIZER_PREFIX):
            self.called = True
            self.hook()
        return iter(rows)


def test_a_child_started_while_its_parent_times_out_is_closed() -> None:
    """``children-follow-parent``: a time-out read the parent's children, then the parent's
    drive (on another engine) started an awaited child, then the time-out landed: nothing
    in it named the child, so the child ran on after its parent ended. A running run's end
    from outside now always closes children, read once it has landed."""
    store, clock = MemoryStorage(), VirtualClock()
    flows = {
        "parent": workflow("parent").execute(_waits_for_its_child),
        "kid": workflow("kid").execute(_kid),
    }
    options: dict[str, Any] = {
        "ownership": "workflow-lease",
        "background_tasks": "manual",
        "clock": clock,
    }
    driver = Engine.create(store, flows, engine_id="driver", **options)
    with driver.invocation():
        driver.start("parent", id="p-1")  # parks on its signal; the claim is released
    racing = _AtTheFinalizersRead(store, lambda: driver.signal("p-1", "go"))
    other = Engine.create(racing, flows, engine_id="other", recover=False, **options)
    assert control.time_out(other.runtime, "p-1")  # as its deadline timer does
    assert racing.called
    for _ in range(3):
        clock.advance(15.0)
        other.run_maintenance()
    assert driver.describe("p-1").status == "timed-out"
    assert driver.describe("p-1.kid").status == "cancelled"


class _AfterReadingItSuspended(DelegatingStorage):
    """Calls ``hook`` once, right after a read of ``d-1``'s state finds it suspended: a
    resume on another engine lands between a pass's look at the run and its timers' delete."""

    def __init__(self, inner: MemoryStorage, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.hook, self.called = hook, False

    def _get(self, key: Key) -> bytes | None:
        value = super()._get(key)
        if self.called or key != keys.state_key("d-1") or value is None:
            return value
        if WorkflowState.from_bytes(value).status == "suspended":
            self.called = True
            self.hook()
        return value


def test_a_delayed_start_resumed_while_a_pass_fires_it_still_starts() -> None:
    """``liveness``: a pass (its clock at the start time) read a suspended delayed start's
    timer as due and found the run suspended; a resume on an engine whose clock was a little
    behind then put the run back to pending and re-armed its start timer under the very key
    the pass had read, which the pass deleted once done: the run stayed pending for good.
    A resume now re-arms the start under a key of its own."""
    start = 1_767_225_600.0
    store = MemoryStorage()
    behind, ahead = VirtualClock(start - 10.0), VirtualClock(start - 10.0)
    flows = {"job": workflow("job").execute(_done_at_once)}
    options: dict[str, Any] = {"ownership": "workflow-lease", "background_tasks": "manual"}
    resumer = Engine.create(store, flows, engine_id="resumer", clock=behind, **options)
    resumer.start("job", id="d-1", start_at=start)
    resumer.suspend("d-1")
    racing = _AfterReadingItSuspended(store, lambda: resumer.resume("d-1"))
    passer = Engine.create(racing, flows, engine_id="passer", clock=ahead, recover=False, **options)
    ahead.advance(10.0)  # the start is due for the pass, still 10 ms ahead for the resume
    behind.advance(10.0 - 0.01)
    passer.run_maintenance()
    assert racing.called
    assert resumer.describe("d-1").status == "pending"
    for _ in range(3):
        for clock, engine in ((ahead, passer), (behind, resumer)):
            clock.advance(15.0)
            engine.run_maintenance()
    assert resumer.describe("d-1").status == "completed"


def _sleeps_ten_seconds(ctx: Any, _: Any) -> Any:
    yield ctx.sleep(10.0)
    return "woke"


@pytest.mark.parametrize("driver", ["resumer", "passer"])
def test_a_sleep_resumed_while_a_pass_fires_it_still_wakes(driver: str) -> None:
    """The shape of the delayed-start race above, on a sleeping run: a pass (its clock at the
    sleep's due time) reads the sleep's timer, finds the run suspended and does nothing; a
    resume on an engine whose clock is a little behind re-arms the sleep's timer under its
    original key; the pass then deletes the timers it read. The resumed run must still wake,
    whichever engine drives it next (the resumer's clock says the sleep is 10 ms ahead)."""
    start = 1_767_225_600.0
    store = MemoryStorage()
    behind, ahead = VirtualClock(start), VirtualClock(start)
    flows = {"sleeper": workflow("sleeper").execute(_sleeps_ten_seconds)}
    options: dict[str, Any] = {"ownership": "workflow-lease", "background_tasks": "manual"}
    resumer = Engine.create(store, flows, engine_id="resumer", clock=behind, **options)
    resumer.start("sleeper", id="d-1")
    resumer.suspend("d-1")
    racing = _AfterReadingItSuspended(store, lambda: resumer.resume("d-1"))
    passer = Engine.create(racing, flows, engine_id="passer", clock=ahead, recover=False, **options)
    ahead.advance(10.0)  # the sleep is due for the pass, still 10 ms ahead for the resume
    behind.advance(10.0 - 0.01)
    passer.run_maintenance()
    assert racing.called
    first, second = (resumer, passer) if driver == "resumer" else (passer, resumer)
    first.run_maintenance()
    second.run_maintenance()
    for _ in range(3):
        for clock, engine in ((ahead, passer), (behind, resumer)):
            clock.advance(15.0)
            engine.run_maintenance()
    assert resumer.describe("d-1").status == "completed"


def test_a_maintenance_worker_keeps_no_parked_run_whose_timers_another_share_fires() -> None:
    """``liveness`` (several maintenance workers): an engine that drove a run kept its claim
    once the run parked, and renewed it at every pass of its share; but its share did not
    read the shard the run's timer was in, and the worker whose share did left the timer to
    the claim's holder. The sleep never woke. A worker now releases the parked runs whose
    timers its share does not fire."""
    start = 1_767_225_600.0
    store = MemoryStorage()
    clock = VirtualClock(start)
    flows = {"sleeper": workflow("sleeper").execute(_sleeps_ten_seconds)}
    options: dict[str, Any] = {"ownership": "workflow-lease", "background_tasks": "manual"}
    holder = Engine.create(store, flows, engine_id="holder", clock=clock, **options)
    other = Engine.create(store, flows, engine_id="other", clock=clock, recover=False, **options)
    holder.start("sleeper", id="s-1")
    held = holder_record(
        store.get(keys.owner_holder_key("s-1")), store.get(keys.owner_head_key("s-1"))
    )
    assert held is not None and held["engine_id"] == "holder"  # in the head on layout 3
    shard = keys.shard_of("s-1", holder.runtime.shards.timers)
    for _ in range(6):
        clock.advance(15.0)
        holder.run_maintenance(worker=(shard + 1) % 2, workers=2)
        other.run_maintenance(worker=shard % 2, workers=2)
    assert holder.describe("s-1").status == "completed"
