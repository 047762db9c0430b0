"""Concurrency limits (ADR 0025): ``workflow(..., concurrency=Concurrency(max, key, on_limit))``.

Rules pinned here, on every backend: a run holds one slot of its key from its start to its
terminal status (suspend and recovery keep it); ``reject`` refuses a start beyond ``max``
with ``WorkflowConcurrencyLimitExceededError`` and stores nothing; ``queue`` stores the run
``pending`` and a maintenance pass starts queued runs oldest first when a slot frees; the
slot is freed in the terminal batch, so a crash on either side of it neither leaks nor
doubles a slot; bad limits and bad key functions are typed errors before any write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from feature_support import (
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    recover_fresh,
)

from weft_serverless import (
    ChildWorkflowFailedError,
    Concurrency,
    ConcurrencyKeyError,
    EngineLeaseLostError,
    InvalidArgumentError,
    RetryPolicy,
    WorkflowAlreadyExistsError,
    WorkflowConcurrencyLimitExceededError,
    WorkflowDefinition,
    WorkflowNotFoundError,
    workflow,
)
from weft_serverless.codec import decode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key, SortRange, Storage
from weft_serverless.testing import DelegatingStorage, TestEngine


def _sync(ctx: Any, input: dict[str, Any]) -> Any:
    """Holds its slot until signalled ``go``; fails on ``fail``."""
    word = yield ctx.wait_for_signal("go")
    if word == "fail":
        raise ValueError("asked to fail")
    return {"account": input["account"], "word": word}


def _account(input: Any) -> str:
    return str(input["account"])


def _workflows(max: int = 1, on_limit: str = "reject") -> dict[str, WorkflowDefinition]:
    limit = Concurrency(max=max, key=_account, on_limit=on_limit)  # type: ignore[arg-type]
    return {"sync": workflow("sync", concurrency=limit).execute(_sync)}


def held(storage: Storage, account: str) -> dict[str, str]:
    """Slot sort key -> holder id, for the ``sync`` type and ``account``."""
    partition = keys.concurrency_partition("sync", account)
    return {sort: decode(v)["id"] for sort, v in storage.scan(partition, keys.SLOT_PREFIX)}


def queue_of(storage: Storage, account: str) -> list[str]:
    partition = keys.concurrency_partition("sync", account)
    return [decode(v)["id"] for _, v in storage.scan(partition, keys.QUEUE_PREFIX)]


def _settle(te: TestEngine) -> None:
    """Two passes: one admits queued runs (a wake-up due now), the next drives them."""
    te.advance(0.001)
    te.advance(0.001)


# -- reject ----------------------------------------------------------------------------------


def test_reject_refuses_a_start_beyond_max_and_stores_nothing(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows(max=2))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    with pytest.raises(WorkflowConcurrencyLimitExceededError) as caught:
        te.start("sync", {"account": "a"}, id="a3")
    assert (caught.value.workflow_type, caught.value.key, caught.value.limit) == ("sync", "a", 2)
    assert caught.value.code == "WorkflowConcurrencyLimitExceededError"
    with pytest.raises(WorkflowNotFoundError):
        te.describe("a3")
    assert not list(te.storage.scan(keys.workflow_partition("a3")))
    te.start("sync", {"account": "b"}, id="b1")  # another key has its own slots
    assert sorted(held(te.storage, "a").values()) == ["a1", "a2"]
    assert list(held(te.storage, "b").values()) == ["b1"]
    assert te.describe("a1").concurrency_key == "a"


def test_a_repeated_start_on_a_full_key_gets_its_run_or_already_exists(
    storage_factory: Opener,
) -> None:
    """The limit never hides a start that landed: a repeated idempotency key returns that
    run, a taken id is ``WorkflowAlreadyExistsError``, as with a free slot."""
    te = make_engine(storage_factory, _workflows())
    first = te.start("sync", {"account": "a"}, id="a1", idempotency_key="k1")
    again = te.start("sync", {"account": "a"}, id="a2", idempotency_key="k1")
    assert (first.id, again.id) == ("a1", "a1")
    with pytest.raises(WorkflowAlreadyExistsError):
        te.start("sync", {"account": "a"}, id="a1")
    assert list(held(te.storage, "a").values()) == ["a1"]


def test_a_terminal_move_frees_the_slot_for_the_next_start(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows())
    te.start("sync", {"account": "a"}, id="a1")
    te.signal("a1", "go", "done")
    assert te.describe("a1").status == "completed"
    assert held(te.storage, "a") == {}
    te.start("sync", {"account": "a"}, id="a2")
    te.cancel("a2")
    assert held(te.storage, "a") == {}
    te.start("sync", {"account": "a"}, id="a3")
    te.signal("a3", "go", "fail")
    assert te.describe("a3").status == "failed"
    assert held(te.storage, "a") == {}
    te.start("sync", {"account": "a"}, id="a4", execution_timeout=5)
    te.advance(6)
    assert te.describe("a4").status == "timed-out"
    assert held(te.storage, "a") == {}


def test_suspend_and_recovery_keep_the_slot(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows())
    te.start("sync", {"account": "a"}, id="a1")
    te.suspend("a1")
    with pytest.raises(WorkflowConcurrencyLimitExceededError):
        te.start("sync", {"account": "a"}, id="a2")
    recover_fresh(te, storage_factory)
    te.resume("a1")
    with pytest.raises(WorkflowConcurrencyLimitExceededError):
        te.start("sync", {"account": "a"}, id="a2")
    assert list(held(te.storage, "a").values()) == ["a1"]
    te.signal("a1", "go", "x")
    assert te.describe("a1").status == "completed"


def _flaky(ctx: Any, input: dict[str, Any]) -> Any:
    word = yield ctx.wait_for_signal("go")
    return (yield ctx.run("work", word, retry=RetryPolicy(max_attempts=1)))


def test_retry_of_a_failed_run_takes_a_slot_again(storage_factory: Opener) -> None:
    """A failed run is terminal and holds nothing; its retry is active again, so it takes a
    slot, and is refused while the key is full."""
    outcomes: list[Any] = [ValueError("first time"), "second time"]

    seen: list[dict[str, str]] = []

    def work(_: Any) -> Any:
        seen.append(held(te.storage, "a"))
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    limit = Concurrency(max=1, key=_account)
    flows = {"sync": workflow("sync", concurrency=limit).activities(work=work).execute(_flaky)}
    te = make_engine(storage_factory, flows)
    te.start("sync", {"account": "a"}, id="a1")
    te.signal("a1", "go", "x")
    assert te.describe("a1").status == "failed"
    assert held(te.storage, "a") == {}
    te.start("sync", {"account": "a"}, id="a2")
    with pytest.raises(WorkflowConcurrencyLimitExceededError):
        te.retry("a1")
    assert te.describe("a1").status == "failed"
    te.cancel("a2")
    te.retry("a1")
    assert te.describe("a1").status == "completed"
    assert te.get_handle("a1").result() == "second time"
    assert [list(slots.values()) for slots in seen] == [["a1"], ["a1"]]
    assert held(te.storage, "a") == {}


def test_a_delayed_start_holds_its_slot_while_pending(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows())
    te.start("sync", {"account": "a"}, id="a1", start_after=10)
    assert te.describe("a1").status == "pending"
    with pytest.raises(WorkflowConcurrencyLimitExceededError):
        te.start("sync", {"account": "a"}, id="a2")
    te.advance(11)
    assert te.describe("a1").status == "running"
    assert list(held(te.storage, "a").values()) == ["a1"]


def test_purge_of_a_finished_run_leaves_the_slots_alone(storage_factory: Opener) -> None:
    """A terminal run holds no slot, so purging it (now or by retention) cannot free one
    that another run holds; an active run cannot be purged at all."""
    te = make_engine(storage_factory, _workflows(max=2), retention={"completed": 5})
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    with pytest.raises(InvalidArgumentError):
        te.purge("a1")
    te.signal("a1", "go", "x")
    te.start("sync", {"account": "a"}, id="a3")
    te.advance(6)  # a1's retention window passes: purged
    with pytest.raises(WorkflowNotFoundError):
        te.describe("a1")
    assert sorted(held(te.storage, "a").values()) == ["a2", "a3"]
    with pytest.raises(WorkflowConcurrencyLimitExceededError):
        te.start("sync", {"account": "a"}, id="a4")


# -- queue -----------------------------------------------------------------------------------


def test_queue_starts_waiting_runs_oldest_first(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="z1")
    te.advance(1)
    te.start("sync", {"account": "a"}, id="y2")  # ids sort the other way round on purpose
    te.advance(1)
    te.start("sync", {"account": "a"}, id="x3")
    te.start("sync", {"account": "b"}, id="b1")  # another key starts at once
    assert [te.describe(i).status for i in ("z1", "y2", "x3", "b1")] == [
        "running",
        "pending",
        "pending",
        "running",
    ]
    assert queue_of(te.storage, "a") == ["y2", "x3"]
    _settle(te)  # the queued starts' own admit timers find the key full: nothing moves
    assert te.describe("y2").status == "pending"
    te.signal("z1", "go", "one")
    _settle(te)
    assert te.describe("y2").status == "running"
    assert te.describe("x3").status == "pending"
    assert list(held(te.storage, "a").values()) == ["y2"]
    te.signal("y2", "go", "two")
    _settle(te)
    te.signal("x3", "go", "three")
    assert te.describe("x3").status == "completed"
    assert te.get_handle("x3").result() == {"account": "a", "word": "three"}
    assert held(te.storage, "a") == {} and queue_of(te.storage, "a") == []


def test_a_queued_run_starts_when_the_slot_frees_without_a_maintenance_pass(
    storage_factory: Opener,
) -> None:
    """The call that ends the slot's holder here admits the oldest queued run and drives it
    inline (manual mode): no maintenance pass, no tick of the clock. The admit timer armed in
    the terminal batch stays the fallback; firing it later finds the key full and moves
    nothing."""
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    te.start("sync", {"account": "a"}, id="a3")
    assert [te.describe(i).status for i in ("a1", "a2", "a3")] == ["running", "pending", "pending"]
    te.signal("a1", "go", "one")
    assert [te.describe(i).status for i in ("a1", "a2", "a3")] == [
        "completed",
        "running",
        "pending",
    ]
    assert list(held(te.storage, "a").values()) == ["a2"]
    te.cancel("a2")  # an end from outside frees the slot too
    assert te.describe("a3").status == "running"
    _settle(te)
    assert list(held(te.storage, "a").values()) == ["a3"] and queue_of(te.storage, "a") == []
    te.signal("a3", "go", "three")
    assert te.get_handle("a3").result() == {"account": "a", "word": "three"}


def test_start_or_signal_on_a_full_key_queues_the_run_with_its_signal(
    storage_factory: Opener,
) -> None:
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start_or_signal("sync", {"account": "a"}, id="a2", signal="go", payload="early")
    assert te.describe("a2").status == "pending"
    te.signal("a1", "go", "x")
    _settle(te)
    assert te.get_handle("a2").result() == {"account": "a", "word": "early"}


def test_a_new_start_queues_behind_runs_already_waiting(storage_factory: Opener) -> None:
    """A slot that frees is for the oldest queued run, not for a start that comes later."""
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    te.signal("a1", "go", "x")  # freed; a2's admission waits for the next pass
    te.start("sync", {"account": "a"}, id="a3")
    assert te.describe("a3").status == "pending"
    _settle(te)
    assert te.describe("a2").status == "running"
    assert te.describe("a3").status == "pending"


def test_cancelling_a_queued_run_drops_it_from_the_queue(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    te.start("sync", {"account": "a"}, id="a3")
    te.cancel("a2")
    assert queue_of(te.storage, "a") == ["a3"]
    te.signal("a1", "go", "x")
    _settle(te)
    assert te.describe("a2").status == "cancelled"
    assert te.describe("a3").status == "running"


def test_a_suspended_queued_run_waits_for_its_resume(storage_factory: Opener) -> None:
    """Admission skips a suspended queued run (the next one takes the slot); resumed, it
    is queued again and admitted when a slot frees, never started without one."""
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    te.start("sync", {"account": "a"}, id="a3")
    te.suspend("a2")
    te.signal("a1", "go", "x")
    _settle(te)
    assert te.describe("a3").status == "running"
    te.resume("a2")
    _settle(te)
    assert te.describe("a2").status == "pending"
    te.signal("a3", "go", "x")
    _settle(te)
    assert te.describe("a2").status == "running"


def test_a_delayed_queued_run_is_admitted_then_waits_for_its_time(
    storage_factory: Opener,
) -> None:
    te = make_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2", start_after=30)
    te.advance(31)  # its start time passes while it is still queued: it stays pending
    assert te.describe("a2").status == "pending"
    te.signal("a1", "go", "x")
    _settle(te)
    assert te.describe("a2").status == "running"


class _AfterSlotRead(DelegatingStorage):
    """Runs ``hook`` once, right after a read of the ``sync``/``a`` slots has been answered."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.hook: Callable[[], None] | None = None

    def _scan(
        self, partition: str, rng: SortRange, limit: int | None, reverse: bool
    ) -> Iterator[tuple[str, bytes]]:
        rows = list(super()._scan(partition, rng, limit, reverse))
        hook, slots = self.hook, keys.concurrency_partition("sync", "a")
        if hook is not None and partition == slots and rng.low == keys.SLOT_PREFIX:
            self.hook = None
            hook()
        return iter(rows)


def test_a_slot_freed_while_a_pass_reads_the_slots_full_still_admits(
    storage_factory: Opener,
) -> None:
    """A pass fires an admit timer, reads every slot held, and only then does the holder end
    (on another engine, in the same millisecond). The end's admit timer must survive the
    pass deleting the timer it fired, or the queued runs would wait for ever."""
    hooked = _AfterSlotRead(storage_factory())
    te = TestEngine(_workflows(on_limit="queue"), storage=hooked)
    other = make_engine(storage_factory, _workflows(on_limit="queue"))
    other.clock = te.clock
    other.recover()  # rebuilt on the shared clock
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    te.advance(1)  # a2's own admit timer: the key is full
    te.start("sync", {"account": "a"}, id="a3")  # arms an admit timer due now
    hooked.hook = lambda: other.signal("a1", "go", "x")
    te.run_maintenance()  # fires it at the same instant; a1 ends right after the slot read
    assert te.describe("a1").status == "completed"
    _settle(te)
    assert te.describe("a2").status == "running"
    assert te.describe("a3").status == "pending"


# -- child workflows -------------------------------------------------------------------------


def _parent(ctx: Any, accounts: list[str]) -> Any:
    results = []
    for n, account in enumerate(accounts):
        try:
            results.append((yield ctx.start_child("sync", {"account": account}, id=f"c{n}")))
        except ChildWorkflowFailedError as exc:
            results.append(exc.error_type)
    return results


def _parent_starts(ctx: Any, accounts: list[str]) -> Any:
    """Starts every child without waiting (their ids are the results)."""
    ids = []
    for n, account in enumerate(accounts):
        command = ctx.start_child(
            "sync", {"account": account}, id=f"k{n}", parent_close_policy="abandon"
        )
        try:
            ids.append((yield command))
        except ChildWorkflowFailedError as exc:
            ids.append(f"{exc.status}: {exc.error_type}")
    return ids


def test_a_child_start_counts_against_the_limit(storage_factory: Opener) -> None:
    flows = _workflows()
    flows["parent"] = workflow("parent").execute(_parent_starts)
    te = make_engine(storage_factory, flows)
    te.start("sync", {"account": "a"}, id="a1")
    te.start("parent", ["b", "a"], id="p")
    assert te.get_handle("p").result() == [
        "k0",
        "not-started: WorkflowConcurrencyLimitExceededError",
    ]
    assert te.describe("k0").status == "running"  # the child for another key started
    with pytest.raises(WorkflowNotFoundError):
        te.describe("k1")
    assert list(held(te.storage, "a").values()) == ["a1"]


def test_a_queued_child_runs_when_a_slot_frees_and_its_parent_gets_the_result(
    storage_factory: Opener,
) -> None:
    flows = _workflows(on_limit="queue")
    flows["parent"] = workflow("parent").execute(_parent)
    te = make_engine(storage_factory, flows)
    te.start("sync", {"account": "a"}, id="a1")
    te.start("parent", ["a"], id="p")
    assert te.describe("c0").status == "pending"
    te.signal("a1", "go", "x")
    _settle(te)
    te.signal("c0", "go", "child")
    te.advance(0.001)
    assert te.get_handle("p").result() == [{"account": "a", "word": "child"}]


# -- crashes ---------------------------------------------------------------------------------


def _puts_slot(account: str) -> Any:
    partition = keys.concurrency_partition("sync", account)
    return lambda key: key.partition == partition and key.sort.startswith(keys.SLOT_PREFIX)


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_crash_around_the_start_batch_takes_the_slot_with_the_run_or_not_at_all(
    storage_factory: Opener, after: bool
) -> None:
    te, crashing = crashable_engine(storage_factory, _workflows())
    crashing.arm(_puts_slot("a"), after=after)
    with expect_crash():
        te.start("sync", {"account": "a"}, id="a1")
    engine = recover_fresh(te, storage_factory)
    te.advance(61)  # past the wake-up grace: a landed start is driven
    slots = held(te.storage, "a")
    if after:
        assert engine.describe("a1").status == "running"
        assert list(slots.values()) == ["a1"]
        te.signal("a1", "go", "x")
        assert held(te.storage, "a") == {}
    else:
        assert slots == {}
        with pytest.raises(WorkflowNotFoundError):
            engine.describe("a1")
    te.start("sync", {"account": "a"}, id="a2")


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_crash_around_the_terminal_batch_frees_the_slot_exactly_once(
    storage_factory: Opener, after: bool
) -> None:
    te, crashing = crashable_engine(storage_factory, _workflows(max=2))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    target = keys.state_key("a1")

    def terminal(key: Key) -> bool:
        return key == target

    crashing.arm(terminal, after=after)
    with expect_crash():
        te.signal("a1", "go", "x")
    recover_fresh(te, storage_factory)
    te.advance(61)
    assert te.describe("a1").status == "completed"
    assert list(held(te.storage, "a").values()) == ["a2"]
    te.start("sync", {"account": "a"}, id="a3")
    with pytest.raises(WorkflowConcurrencyLimitExceededError):
        te.start("sync", {"account": "a"}, id="a4")


def test_a_crash_during_admission_leaves_the_admit_timer_to_finish_it(
    storage_factory: Opener,
) -> None:
    te, crashing = crashable_engine(storage_factory, _workflows(on_limit="queue"))
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    crashing.arm(_puts_slot("a"), after=True)
    with expect_crash():
        te.signal("a1", "go", "x")  # a1 ends; its slot is freed and a2 admitted inline
    recover_fresh(te, storage_factory)
    _settle(te)
    assert te.describe("a2").status == "running"
    assert list(held(te.storage, "a").values()) == ["a2"]
    assert queue_of(te.storage, "a") == []


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max": 0}, "max"),
        ({"max": -1}, "max"),
        ({"max": 1.5}, "max"),
        ({"max": True}, "max"),
        ({"max": 1, "on_limit": "wait"}, "on_limit"),
        ({"max": 1, "key": "account"}, "key"),
    ],
)
def test_a_bad_limit_is_refused_where_it_is_declared(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        Concurrency(**options)
    assert caught.value.field == field


@pytest.mark.parametrize(
    "key",
    [
        lambda input: input["missing"],
        lambda input: 7,
        lambda input: None,
        lambda input: "k" * 65,
        lambda input: "\ud800",
    ],
    ids=["raises", "int", "none", "too-long", "surrogate"],
)
def test_a_bad_key_function_is_a_typed_error_at_the_start_and_stores_nothing(
    storage_factory: Opener, key: Any
) -> None:
    limit = Concurrency(max=1, key=key)
    te = make_engine(storage_factory, {"sync": workflow("sync", concurrency=limit).execute(_sync)})
    with pytest.raises(ConcurrencyKeyError) as caught:
        te.start("sync", {"account": "a"}, id="a1")
    assert caught.value.code == "ConcurrencyKeyError"
    with pytest.raises(WorkflowNotFoundError):
        te.describe("a1")
    assert te.storage.stats.snapshot()["items_written"] == 0


# -- fencing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ownership", ["lease", "workflow-lease"])
def test_limits_hold_under_the_fencing_modes(storage_factory: Opener, ownership: str) -> None:
    """Starts, the terminal free and admission all carry the mode's fence and still work."""
    te = make_engine(storage_factory, _workflows(on_limit="queue"), ownership=ownership)
    te.start("sync", {"account": "a"}, id="a1")
    te.start("sync", {"account": "a"}, id="a2")
    assert te.describe("a2").status == "pending"
    te.signal("a1", "go", "x")
    _settle(te)
    assert te.describe("a2").status == "running"
    te.signal("a2", "go", "y")
    assert te.get_handle("a2").result() == {"account": "a", "word": "y"}
    assert held(te.storage, "a") == {} and queue_of(te.storage, "a") == []


def test_a_deposed_lease_holder_cannot_take_a_slot(storage_factory: Opener) -> None:
    """Under ``lease`` a start carries the store fence: an engine whose lease was taken over
    stores neither the run nor its slot."""
    te = make_engine(storage_factory, _workflows(), ownership="lease")
    te.storage.put(keys.meta_key(keys.LEASE_EPOCH), b"another-engine")
    with pytest.raises(EngineLeaseLostError):  # the engine stops; nothing lands
        te.start("sync", {"account": "a"}, id="a1")
    assert held(te.storage, "a") == {}
    assert te.storage.get(keys.state_key("a1")) is None


def test_the_longest_type_and_key_fit_every_record_and_timer(storage_factory: Opener) -> None:
    """A 256-byte type and a 64-byte key, all outside ASCII (three bytes each once encoded):
    slots, queue entries and admit timers still fit each backend's key limits."""
    name, key = "\u00fc" * 128, "\u00e9" * 32
    limit = Concurrency(max=1, key=lambda input: input["k"], on_limit="queue")
    te = make_engine(storage_factory, {name: workflow(name, concurrency=limit).execute(_sync)})
    te.start(name, {"k": key, "account": "a"}, id="l1")
    te.start(name, {"k": key, "account": "a"}, id="l2")
    assert te.describe("l2").status == "pending"
    te.signal("l1", "go", "x")
    _settle(te)
    assert te.describe("l2").status == "running"
    assert te.describe("l2").concurrency_key == key
