"""``ctx.continue_as_new(input)``: end a run and start the same id again with a fresh history.

Rules pinned here: the continue is one batch (new state with run number + 1, the new input,
this run's version pins deleted, the wake-up moved) conditioned on the state read and fenced;
the new run replays only its own steps (records of earlier runs sit below its first step
slot, are never replayed, and the next drive deletes them in chunks, so the partition read
on resume holds only the steps since the last continue); buffered signals carry over;
``handle.result()`` and ``describe`` follow the id to the last run; a parent hears from a
continuing child once, at its final end; a run with open children, or an input that cannot
be encoded, gets the error at the yield and nothing is written; ``max_history`` counts per
run. Crashes just before and just after the batch leave a run that recovers to the same result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_state,
    recover_fresh,
    sorts_with,
)

from weft_serverless import (
    InvalidArgumentError,
    WorkflowDefinition,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    workflow,
)
from weft_serverless.storage import MemoryStorage, keys
from weft_serverless.storage.base import Condition, Delete, Op, Put
from weft_serverless.testing import CrashingStorage, DelegatingStorage, TestEngine

WF = "wf-loop"


def _counter(ctx: Any, state: dict[str, int]) -> Any:
    """Three probes per run, then continue with the total, until ``rounds`` runs are done."""
    total = state["total"]
    for i in range(3):
        total += yield ctx.run("probe", i)
    if state["round"] + 1 < state["rounds"]:
        yield ctx.continue_as_new(
            {"total": total, "round": state["round"] + 1, "rounds": state["rounds"]}
        )
    return {"total": total, "round": state["round"]}


def _defs(calls: Calls, body: Any = _counter, **options: Any) -> dict[str, WorkflowDefinition]:
    builder = workflow("loop", **options).activities(probe=calls.fn("probe", lambda x: x + 1))
    return {"loop": builder.execute(body)}


def _start(rounds: int) -> dict[str, int]:
    return {"total": 0, "round": 0, "rounds": rounds}


def test_a_chain_of_runs_ends_with_the_last_runs_result(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _defs(calls))
    handle = te.start("loop", _start(4), id=WF)
    assert handle.result() == {"total": 24, "round": 3}
    description = te.describe(WF)
    assert (description.status, description.run) == ("completed", 4)
    assert description.input == {"total": 18, "round": 3, "rounds": 4}
    assert len(calls.log) == 12
    # Only the last run's three step records are left: earlier runs' were deleted.
    assert len(sorts_with(te.storage, WF, keys.OP_PREFIX)) == 3
    assert te.list(status="completed")[0].id == WF


def test_resume_reads_only_the_steps_since_the_last_continue(storage_factory: Opener) -> None:
    """A run parked after many continued runs: recovering it reads its partition, which
    holds the current run's records only (the same as a first run parked there)."""

    def looping(ctx: Any, state: dict[str, int]) -> Any:
        for i in range(5):
            yield ctx.run("probe", i)
        if state["round"] < 9:
            yield ctx.continue_as_new({"round": state["round"] + 1})
        return (yield ctx.wait_for_signal("go"))

    calls = Calls()
    te = make_engine(storage_factory, _defs(calls, looping))
    te.start("loop", {"round": 0}, id=WF)
    te.start("loop", {"round": 9}, id="wf-first-run")  # one run parked at the same point
    assert (te.describe(WF).run, te.describe("wf-first-run").run) == (10, 1)
    assert len(sorts_with(te.storage, WF, keys.OP_PREFIX)) == 5
    recover_fresh(te, storage_factory)
    storage = te.storage
    read = []
    for workflow_id in (WF, "wf-first-run"):
        before = storage.stats.snapshot()
        te.signal(workflow_id, "go", "done")
        after = storage.stats.snapshot()
        assert te.describe(workflow_id).result == "done"
        read.append(
            (after["scans"] - before["scans"], after["scanned_items"] - before["scanned_items"])
        )
    assert read[0] == read[1]
    assert len(calls.log) == 55
    partition = keys.workflow_partition(WF)
    assert next(iter(storage.scan(partition, keys.OP_PREFIX)))[0] == "op#00000045"


def test_a_history_longer_than_one_batch_is_deleted_in_chunks(storage_factory: Opener) -> None:
    """150 step records (DynamoDB takes 100 items a batch) are gone after the continue."""

    def long_run(ctx: Any, state: dict[str, int]) -> Any:
        steps = 150 if state["round"] == 0 else 1
        for i in range(steps):
            yield ctx.run("probe", i)
        if state["round"] == 0:
            yield ctx.continue_as_new({"round": 1})
        return (yield ctx.wait_for_signal("go"))

    te = make_engine(storage_factory, _defs(Calls(), long_run))
    te.start("loop", {"round": 0}, id=WF)
    assert te.describe(WF).run == 2
    assert [sort for sort in sorts_with(te.storage, WF, keys.OP_PREFIX)] == ["op#00000150"]
    assert te.runtime.metrics.counters["earlier_run_records_deleted"] == 150


def test_buffered_signals_carry_over(storage_factory: Opener) -> None:
    def waits(ctx: Any, state: dict[str, Any]) -> Any:
        got = yield ctx.wait_for_signal("item")
        items = [*state["items"], got]
        if len(items) < 3:
            yield ctx.continue_as_new({"items": items})
        return items

    te = make_engine(storage_factory, _defs(Calls(), waits))
    te.start("loop", {"items": []}, id=WF)
    te.signal(WF, "item", "a")
    assert te.describe(WF).run == 2
    te.signal(WF, "item", "b")
    assert te.describe(WF).run == 3
    te.signal(WF, "item", "c")
    description = te.describe(WF)
    assert (description.result, description.run) == (["a", "b", "c"], 3)


def test_buffered_signals_sent_before_the_continue_are_consumed_by_the_next_run(
    storage_factory: Opener,
) -> None:
    def waits(ctx: Any, state: dict[str, Any]) -> Any:
        yield ctx.wait_for_signal("start")
        if state["round"] == 0:
            yield ctx.continue_as_new({"round": 1})
        return (yield ctx.wait_for_signal("item"))

    te = make_engine(storage_factory, _defs(Calls(), waits))
    te.start("loop", {"round": 0}, id=WF)
    te.signal(WF, "item", "early")  # buffered while run 1 waits for "start"
    te.signal(WF, "start")
    assert te.describe(WF).run == 2
    te.signal(WF, "start")
    assert te.describe(WF).result == "early"


def test_version_pins_are_per_run(storage_factory: Opener) -> None:
    def pinned(ctx: Any, state: dict[str, Any]) -> Any:
        version = yield ctx.get_version("change", 1, 2)
        if state["round"] == 0:
            yield ctx.continue_as_new({"round": 1})
        return version

    te = make_engine(storage_factory, _defs(Calls(), pinned))
    te.start("loop", {"round": 0}, id=WF)
    assert te.describe(WF).result == 2
    assert len(sorts_with(te.storage, WF, keys.VERSION_PREFIX)) == 1


def test_max_history_counts_per_run(storage_factory: Opener) -> None:
    """Three steps per run under ``max_history=3``: twelve steps in all complete."""
    calls = Calls()
    te = make_engine(storage_factory, _defs(calls, max_history=3))
    te.start("loop", _start(4), id=WF)
    assert te.describe(WF).result == {"total": 24, "round": 3}


def test_a_child_that_continues_reports_to_its_parent_once_at_its_end(
    storage_factory: Opener,
) -> None:
    def parent(ctx: Any, _: Any) -> Any:
        return (yield ctx.start_child("loop", _start(3), id="wf-child"))

    calls = Calls()
    defs = {**_defs(calls), "parent": workflow("parent").execute(parent)}
    te = make_engine(storage_factory, defs)
    te.start("parent", id="wf-parent")
    assert te.describe("wf-child").run == 3
    assert te.describe("wf-parent").result == {"total": 18, "round": 2}
    assert len(sorts_with(te.storage, "wf-parent", keys.CHILD_PREFIX)) == 1


def test_open_children_refuse_the_continue_at_the_yield(storage_factory: Opener) -> None:
    def leaves_child(ctx: Any, _: Any) -> Any:
        yield ctx.start_child("waiter", id="wf-waiter", parent_close_policy="request-cancel")
        try:
            yield ctx.continue_as_new({})
        except InvalidArgumentError as exc:
            return f"refused: {'children are open' in str(exc)}"
        return "continued"

    def waiter(ctx: Any, _: Any) -> Any:
        return (yield ctx.wait_for_signal("never"))

    defs = {
        **_defs(Calls(), leaves_child),
        "waiter": workflow("waiter").execute(waiter),
    }
    te = make_engine(storage_factory, defs)
    te.start("loop", id=WF)
    description = te.describe(WF)
    assert (description.result, description.run) == ("refused: True", 1)


def test_an_input_that_cannot_be_encoded_is_raised_at_the_yield(storage_factory: Opener) -> None:
    def bad(ctx: Any, _: Any) -> Any:
        try:
            yield ctx.continue_as_new({"lock": object()})
        except Exception as exc:
            return type(exc).__name__
        return "continued"

    te = make_engine(storage_factory, _defs(Calls(), bad))
    te.start("loop", id=WF)
    description = te.describe(WF)
    assert (description.result, description.run) == ("CodecError", 1)


@pytest.mark.parametrize("after", [False, True], ids=["before-batch", "after-batch"])
def test_a_crash_around_the_continue_batch_recovers_to_the_same_result(
    storage_factory: Opener, after: bool
) -> None:
    """Before the batch: nothing of it is stored, the old run replays to the continue again.
    After it (the old run's records not deleted yet): the new run is driven and replays
    none of them, and its drive deletes them."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _defs(calls, body=_waiting_counter))
    te.start("loop", _start(3), id=WF)
    crashing.arm(puts_state(WF), after=after)  # the next state put: the continue batch
    with expect_crash():
        te.signal(WF, "go")
    assert len(calls.log) == 3
    assert te.describe(WF).run == (2 if after else 1)
    recover_fresh(te, storage_factory)  # drives run 1 to its continue again, or run 2
    description = te.describe(WF)
    assert (description.status, description.run) == ("running", 2)
    assert len(sorts_with(te.storage, WF, keys.OP_PREFIX)) == 3  # run 2's probes only
    te.signal(WF, "go")
    assert te.describe(WF).run == 3
    te.signal(WF, "go")
    description = te.describe(WF)
    assert (description.result, description.run) == ({"total": 18, "round": 2}, 3)
    assert len(calls.log) == 9
    assert len(sorts_with(te.storage, WF, keys.OP_PREFIX)) == 4


def _waiting_counter(ctx: Any, state: dict[str, int]) -> Any:
    total = state["total"]
    for i in range(3):
        total += yield ctx.run("probe", i)
    yield ctx.wait_for_signal("go")
    if state["round"] + 1 < state["rounds"]:
        yield ctx.continue_as_new(
            {"total": total, "round": state["round"] + 1, "rounds": state["rounds"]}
        )
    return {"total": total, "round": state["round"]}


def test_a_second_start_with_the_idempotency_key_follows_the_chain(storage_factory: Opener) -> None:
    calls = Calls()
    te = make_engine(storage_factory, _defs(calls))
    first = te.start("loop", _start(2), id=WF, idempotency_key="order-7")
    again = te.start("loop", _start(2), id=WF, idempotency_key="order-7")
    assert again.id == first.id == WF
    assert again.result() == {"total": 12, "round": 1}
    assert len(calls.log) == 6  # the second start started nothing


def test_a_timer_the_old_run_left_only_wakes_the_new_run(storage_factory: Opener) -> None:
    """Run 1 races a signal against a 10 s sleep; the signal wins and the run continues. The
    sleep's timer fires in run 2, which is parked on its own wait, and changes nothing."""

    def racing(ctx: Any, state: dict[str, int]) -> Any:
        if state["round"] == 0:
            yield ctx.race(ctx.wait_for_signal("go"), ctx.sleep(10))
            yield ctx.continue_as_new({"round": 1})
        return (yield ctx.wait_for_signal("done"))

    te = make_engine(storage_factory, _defs(Calls(), racing))
    te.start("loop", {"round": 0}, id=WF)
    te.signal(WF, "go")
    assert te.describe(WF).run == 2
    te.advance(11)
    description = te.describe(WF)
    assert (description.status, description.run) == ("running", 2)
    assert sorts_with(te.storage, WF, keys.PENDING_PREFIX) == []  # run 1's sleep: deleted
    te.signal(WF, "done", "ok")
    assert te.describe(WF).result == "ok"


def test_two_engines_racing_to_the_continue_commit_one_run(storage_factory: Opener) -> None:
    """Engine A's continue batch is refused because engine B, driving the same run, continued
    first (mode none: the condition on the state read decides). A re-reads and finds run 2
    parked: the continue happened once and no step of either run ran twice."""
    calls = Calls()
    defs = _defs(calls, body=_waiting_counter)
    b = make_engine(storage_factory, defs)

    class BFirst(DelegatingStorage):
        armed = raced = False

        def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
            if (
                self.armed
                and not self.raced
                and any(isinstance(op, Put) and op.key == keys.state_key(WF) for op in ops)
            ):
                self.raced = True
                b.signal(WF, "nudge")  # B drives run 1 to its continue and runs run 2
            return self.inner.conditional_batch(conditions, ops)

    storage = BFirst(storage_factory())
    a = TestEngine(defs, storage=storage)
    a.start("loop", _start(3), id=WF)  # run 1 parks on "go"
    storage.armed = True
    a.signal(WF, "go")  # A reaches the continue; B continues first
    assert storage.raced
    description = a.describe(WF)
    assert (description.status, description.run) == ("running", 2)
    assert len(calls.log) == 6  # run 1's three probes by A, run 2's three by B
    a.signal(WF, "go")
    assert a.describe(WF).run == 3
    assert len(calls.log) == 9


def test_two_engines_in_threads_drive_one_chain_to_one_end(storage_factory: Opener) -> None:
    """Engine A starts a chain of four runs and drives it inline while engine B, in another
    thread on its own handle, keeps waking the same id (a signal nobody waits for). Both
    drive runs and race to their continues; the chain ends once, in run 4, with its result
    (after at most one wake-up grace), and run 4's step slots hold one record each."""
    calls = Calls()
    defs = _defs(calls)
    a, b = make_engine(storage_factory, defs), make_engine(storage_factory, defs)
    started = threading.Event()
    errors: list[BaseException] = []

    delivered: list[str] = []

    def nudge() -> None:
        started.wait(10)
        for _ in range(100_000):
            try:
                b.signal(WF, "nudge")
                delivered.append(WF)
            except WorkflowNotFoundError:
                time.sleep(0)  # not created yet: let the other thread run
            except WorkflowNotRunningError:
                return
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    def drive() -> None:
        started.set()
        try:
            a.start("loop", _start(4), id=WF)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=drive), threading.Thread(target=nudge)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    # A drive that lost a race leaves the run to the other engine or to its wake-up timer.
    a.advance(61)
    b.advance(61)
    description = a.describe(WF)
    assert (description.status, description.run) == ("completed", 4)
    assert description.result == {"total": 24, "round": 3}
    first = 9  # three top-level steps in each of runs 1-3
    current = [s for s in sorts_with(a.storage, WF, keys.OP_PREFIX) if s >= f"op#{first:08d}"]
    assert current == [f"op#{first + i:08d}" for i in range(3)]


def test_an_update_that_drives_a_run_into_its_continue_lands_in_the_next_run(
    storage_factory: Opener,
) -> None:
    """The run's sleep is due but not driven yet when an update arrives: the update's drive
    carries the run to its continue, then drives the new run to its first park point and
    applies the update there (rather than reporting the run as not parked)."""

    def body(ctx: Any, state: dict[str, int]) -> Any:
        ctx.on_update("tag", lambda item: f"run {state['round'] + 1} took {item}")
        if state["round"] == 0:
            yield ctx.sleep(5)
            yield ctx.continue_as_new({"round": 1})
        return (yield ctx.wait_for_signal("done"))

    te = make_engine(storage_factory, _defs(Calls(), body))
    te.start("loop", {"round": 0}, id=WF)
    te.clock.advance(5)  # due, but no maintenance pass has fired the timer
    assert te.engine.update(WF, "tag", "x") == "run 2 took x"
    assert te.describe(WF).run == 2


class _CrashAfterFirstCleanup(CrashingStorage):
    """Crashes right after the first batch made only of deletes (a cleanup chunk) lands."""

    def _arm(self, ops: Sequence[Op]) -> None:
        if not self.crashed and ops and all(isinstance(op, Delete) for op in ops):
            self.crash_after_write = self.writes + 1

    def _batch(self, ops: Sequence[Op]) -> None:
        self._arm(ops)
        super()._batch(ops)

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        self._arm(ops)
        return super()._conditional_batch(conditions, ops)


@pytest.mark.backends("dynamodb", "dynamodb-http")  # the others take 10,000 items a batch
def test_a_crash_between_cleanup_chunks_leaves_records_the_next_drive_deletes(
    storage_factory: Opener,
) -> None:
    """150 records take two chunks under DynamoDB's 100-item limit; the process dies after
    the first. The records left are never replayed: the recovered run's wake-up drives it,
    and that drive deletes them."""
    _crash_between_cleanup_chunks(storage_factory)


def test_a_crash_between_cleanup_chunks_on_a_store_with_a_small_batch_limit() -> None:
    """The same on memory, configured with DynamoDB's 100-item batch limit."""
    store = MemoryStorage(max_batch_ops=100)
    _crash_between_cleanup_chunks(lambda: store)


def _crash_between_cleanup_chunks(storage_factory: Opener) -> None:
    def long_run(ctx: Any, state: dict[str, int]) -> Any:
        for i in range(150 if state["round"] == 0 else 1):
            yield ctx.run("probe", i)
        if state["round"] == 0:
            yield ctx.continue_as_new({"round": 1})
        return (yield ctx.wait_for_signal("go"))

    calls = Calls()
    defs = _defs(calls, long_run)
    te = TestEngine(defs, storage=_CrashAfterFirstCleanup(storage_factory()))
    with expect_crash():
        te.start("loop", {"round": 0}, id=WF)
    left = sorts_with(te.storage, WF, keys.OP_PREFIX)
    assert 0 < len(left) < 150 and all(sort < "op#00000150" for sort in left)
    recover_fresh(te, storage_factory)
    te.advance(61)  # the wake-up the continue batch armed
    assert sorts_with(te.storage, WF, keys.OP_PREFIX) == ["op#00000150"]
    assert len(calls.log) == 151
    te.signal(WF, "go", "done")
    assert te.describe(WF).result == "done"
