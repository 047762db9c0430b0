"""Activity branches of ``all``, ``map`` and ``race`` run at the same time.

Concurrency is proven with barriers, not timing: a ``threading.Barrier`` of ``n`` parties only
opens when ``n`` branches wait on it at once, so run one after another the activities would
break it (and the test would fail with ``BrokenBarrierError`` in the step's error).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from feature_support import (
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
    recover_fresh,
)

from weft_serverless import (
    ConfigurationError,
    InvalidArgumentError,
    RetryPolicy,
    WorkflowFailedError,
    current_activity,
    workflow,
)
from weft_serverless.codec import decode
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

BARRIER_SECONDS = 20.0  # only a broken engine waits this long: the branches meet at once


def _all_flow(barrier: threading.Barrier) -> Any:
    def meet(item: int) -> int:
        barrier.wait(BARRIER_SECONDS)
        return item * 10

    def body(ctx: Any, n: int) -> Any:
        return (yield ctx.all(*(ctx.run("meet", i) for i in range(n))))

    return {"fan": workflow("fan").activities(meet=meet).execute(body)}


def test_all_branches_run_at_the_same_time(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, _all_flow(threading.Barrier(4)))
    handle = te.start("fan", 4, id="f")
    assert handle.result() == [0, 10, 20, 30]


def test_async_branches_run_together_on_one_event_loop(storage_factory: Opener) -> None:
    loops: set[int] = set()
    arrived = 0

    async def meet(item: int) -> int:
        nonlocal arrived
        loops.add(id(asyncio.get_running_loop()))
        arrived += 1
        while arrived < 3:  # every branch must be in flight for any to finish
            await asyncio.sleep(0.001)
        return item

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(*(ctx.run("meet", i) for i in range(3))))

    flows = {"fan": workflow("fan").activities(meet=meet).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("fan", id="a").result() == [0, 1, 2]
    assert len(loops) == 1


def test_map_keeps_the_order_and_its_max_concurrency(storage_factory: Opener) -> None:
    lock = threading.Lock()
    running, most = 0, 0
    pair = threading.Barrier(2)

    def square(x: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        pair.wait(BARRIER_SECONDS)  # two at a time meet: at least two run together
        with lock:
            running -= 1
        return x * x

    def body(ctx: Any, items: list[int]) -> Any:
        return (yield ctx.map("square", items, max_concurrency=2))

    flows = {"m": workflow("m").activities(square=square).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("m", [1, 2, 3, 4, 5, 6], id="m").result() == [1, 4, 9, 16, 25, 36]
    assert most == 2


def test_the_engine_bound_caps_branches_across_a_step(storage_factory: Opener) -> None:
    """Twelve branches, a bound of 3: they meet three at a time (a barrier of 3 opens only
    when three run at once), and a fourth never runs beside them."""
    lock = threading.Lock()
    running, most = 0, 0
    three = threading.Barrier(3)

    def work(x: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        three.wait(BARRIER_SECONDS)
        with lock:
            running -= 1
        return x

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.map("work", range(12)))

    flows = {"m": workflow("m").activities(work=work).execute(body)}
    te = make_engine(storage_factory, flows, max_parallel_activities=3)
    assert te.start("m", id="m").result() == list(range(12))
    assert most == 3


def test_max_parallel_activities_zero_runs_branches_in_order(storage_factory: Opener) -> None:
    order: list[int] = []

    def work(x: int) -> int:
        order.append(x)
        return x

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.map("work", range(5)))

    flows = {"m": workflow("m").activities(work=work).execute(body)}
    te = make_engine(storage_factory, flows, max_parallel_activities=0)
    assert te.start("m", id="m").result() == [0, 1, 2, 3, 4]
    assert order == [0, 1, 2, 3, 4]


def test_a_crash_mid_fan_out_reruns_only_unfinished_branches(storage_factory: Opener) -> None:
    """The first branch to finish is recorded, then the process dies: recovery runs every
    other branch again, and never the recorded one."""
    calls: dict[int, int] = {}
    lock = threading.Lock()
    gate = threading.Event()
    first_drive = threading.Barrier(4)

    def work(x: int) -> int:
        with lock:
            calls[x] = calls.get(x, 0) + 1
        if not gate.is_set():
            first_drive.wait(BARRIER_SECONDS)  # all four are in flight
            if x != 0:
                gate.wait(BARRIER_SECONDS)  # branch 0 finishes (and is recorded) first
        return x + 100

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.map("work", range(4)))

    flows = {"m": workflow("m").activities(work=work).execute(body)}
    te, crashing = crashable_engine(storage_factory, flows)
    crashing.arm(puts_prefix(keys.OP_PREFIX + keys.step_slot(0) + ".", "m"))
    with expect_crash():
        te.start("m", id="m")
    gate.set()
    recorded = [
        sort
        for sort, _ in crashing.inner.scan(keys.workflow_partition("m"), keys.OP_PREFIX)
        if "." in sort
    ]
    assert recorded == [keys.OP_PREFIX + keys.branch_slot(keys.step_slot(0), 0)]
    recover_fresh(te, storage_factory)
    te.advance(1)
    assert te.get_handle("m").result() == [100, 101, 102, 103]
    assert calls[0] == 1  # the recorded branch never ran again
    assert all(calls[x] == 2 for x in (1, 2, 3))


def test_replay_reads_each_branch_whatever_order_they_finished(storage_factory: Opener) -> None:
    done_order: list[int] = []
    gates = [threading.Event() for _ in range(3)]

    def work(x: int) -> int:
        if x < 2:
            gates[x].wait(BARRIER_SECONDS)
        done_order.append(x)
        if x == 2:
            gates[1].set()  # finish in the order 2, 1, 0
        elif x == 1:
            gates[0].set()
        return x * 7

    def body(ctx: Any, _: Any) -> Any:
        values = yield ctx.all(*(ctx.run("work", i) for i in range(3)))
        yield ctx.sleep(5)
        return values

    flows = {"m": workflow("m").activities(work=work).execute(body)}
    te = make_engine(storage_factory, flows)
    te.start("m", id="m")
    assert done_order == [2, 1, 0]
    te.crash()
    te.recover(storage_factory())  # a fresh process replays the all from its branches
    te.advance(5)
    assert te.get_handle("m").result() == [0, 7, 14]
    assert done_order == [2, 1, 0]


def test_a_failing_branch_fails_the_all_and_stops_the_others(storage_factory: Opener) -> None:
    started = threading.Event()
    stopped = threading.Event()

    def boom(_: Any) -> None:
        # The failure must come while the other branch runs: one whose thread has not started
        # yet is never run at all (its future is cancelled), which would leave nothing to stop.
        started.wait(BARRIER_SECONDS)
        raise ValueError("no")

    def slow(_: Any) -> str:
        act = current_activity()
        started.set()
        act.cancel_event.wait(BARRIER_SECONDS)
        if act.cancelled:
            stopped.set()
        return "late"

    def body(ctx: Any, _: Any) -> Any:
        once = RetryPolicy(max_attempts=1)
        return (yield ctx.all(ctx.run("slow", retry=once), ctx.run("boom", retry=once)))

    flows = {"f": workflow("f").activities(boom=boom, slow=slow).execute(body)}
    te = make_engine(storage_factory, flows)
    handle = te.start("f", id="f")
    with pytest.raises(WorkflowFailedError) as info:
        handle.result()
    assert "ValueError" in str(info.value)
    assert stopped.wait(BARRIER_SECONDS)
    slow_slot = keys.branch_slot(keys.step_slot(0), 0)
    assert te.storage.get(keys.op_key("f", slow_slot)) is None  # its late result is void


def test_the_losing_race_branch_is_cancelled_and_its_result_discarded(
    storage_factory: Opener,
) -> None:
    started = threading.Event()
    stopped = threading.Event()
    release = threading.Event()

    def fast(_: Any) -> str:
        # The race must end while the loser runs: a loser whose thread has not started yet is
        # never run at all (its future is cancelled), which would leave nothing to stop.
        started.wait(BARRIER_SECONDS)
        return "fast"

    def slow(_: Any) -> str:
        act = current_activity()
        started.set()
        act.cancel_event.wait(BARRIER_SECONDS)
        if act.cancelled:
            stopped.set()
        release.wait(BARRIER_SECONDS)
        return "slow"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.race(ctx.run("slow"), ctx.run("fast")))

    flows = {"r": workflow("r").activities(fast=fast, slow=slow).execute(body)}
    te = make_engine(storage_factory, flows)
    assert list(te.start("r", id="r").result()) == [1, "fast"]
    assert stopped.wait(BARRIER_SECONDS)
    release.set()  # the loser returns only now, long after the race was recorded
    record = decode(te.storage.get(keys.op_key("r", keys.step_slot(0))) or b"")
    assert record["i"] == 1
    assert te.describe("r").status == "completed"


def test_a_sleep_falling_due_beats_a_running_activity(storage_factory: Opener) -> None:
    te_box: list[TestEngine] = []
    stopped = threading.Event()

    def slow(_: Any) -> str:
        te_box[0].clock.advance(10)  # virtual time passes while the activity runs
        act = current_activity()
        act.cancel_event.wait(BARRIER_SECONDS)
        if act.cancelled:
            stopped.set()
        return "slow"

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.race(ctx.run("slow"), ctx.sleep(5)))

    flows = {"r": workflow("r").activities(slow=slow).execute(body)}
    te = make_engine(storage_factory, flows)
    te_box.append(te)
    assert list(te.start("r", id="r").result()) == [1, None]
    assert stopped.wait(BARRIER_SECONDS)


def test_bad_fan_out_arguments_are_typed_errors(storage_factory: Opener) -> None:
    def body(ctx: Any, arg: Any) -> Any:
        try:
            yield ctx.map("work", [1], max_concurrency=arg)
        except InvalidArgumentError as exc:
            return exc.code
        return "accepted"

    flows = {"m": workflow("m").activities(work=lambda x: x).execute(body)}
    te = make_engine(storage_factory, flows)
    for i, bad in enumerate([0, -1, 1.5, True, "2"]):
        assert te.start("m", bad, id=f"m{i}").result() == "InvalidArgumentError"
    for bad_bound in (-1, 1025, 2.0, True):
        with pytest.raises(ConfigurationError):
            make_engine(storage_factory, flows, max_parallel_activities=bad_bound)


def test_the_invocation_deadline_mid_fan_out_reruns_only_unfinished_branches(
    storage_factory: Opener,
) -> None:
    left = [60.0]
    calls: dict[int, int] = {}
    box: list[TestEngine] = []
    first_branch = keys.op_key("m", keys.branch_slot(keys.step_slot(0), 0))

    def work(x: int) -> int:
        calls[x] = calls.get(x, 0) + 1
        act = current_activity()
        if calls[x] == 1 and x == 1:
            while box[0].storage.get(first_branch) is None:  # branch 0 is recorded first
                act.cancel_event.wait(0.005)
            left[0] = 0.5  # then the invocation nears its end
        if calls[x] == 1 and x > 0:
            assert act.cancel_event.wait(BARRIER_SECONDS)
        return x

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.map("work", range(3)))

    flows = {"m": workflow("m").activities(work=work).execute(body)}
    te = make_engine(storage_factory, flows)
    box.append(te)
    with te.engine.invocation(time_left=lambda: left[0]):
        te.start("m", id="m")
    assert te.describe("m").status == "running"
    te.advance(0)  # the next invocation runs the two given-up branches again
    assert te.get_handle("m").result() == [0, 1, 2]
    assert calls == {0: 1, 1: 2, 2: 2}
