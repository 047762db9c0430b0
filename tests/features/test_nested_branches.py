"""Composites nested in composites: every activity beneath one ``all``, ``map`` or ``race``
runs in one fan-out, under the same bound as a flat ``all``.

As in ``test_parallel_branches``, concurrency is proven with barriers rather than timing: a
``threading.Barrier`` of ``n`` parties opens only when ``n`` activities wait on it at once, so
an engine running the inner composites one after another breaks it (``BrokenBarrierError``).
"""

from __future__ import annotations

import threading
from typing import Any

from feature_support import (
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
    recover_fresh,
)

from weft_serverless import RetryPolicy, current_activity, workflow
from weft_serverless.storage import keys

BARRIER_SECONDS = 10.0  # only a broken engine waits this long: the branches meet at once


def _meeting(parties: int) -> Any:
    barrier = threading.Barrier(parties)

    def meet(item: int) -> int:
        barrier.wait(BARRIER_SECONDS)
        return item * 10

    return meet


def test_alls_inside_an_all_run_together(storage_factory: Opener) -> None:
    def body(ctx: Any, _: Any) -> Any:
        left = ctx.all(ctx.run("meet", 0), ctx.run("meet", 1))
        right = ctx.all(ctx.run("meet", 2), ctx.run("meet", 3))
        return (yield ctx.all(left, right))

    flows = {"n": workflow("n").activities(meet=_meeting(4)).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("n", id="n").result() == [[0, 10], [20, 30]]


def test_a_map_inside_an_all_runs_beside_its_siblings(storage_factory: Opener) -> None:
    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.all(ctx.map("meet", [0, 1]), ctx.run("meet", 2)))

    flows = {"n": workflow("n").activities(meet=_meeting(3)).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("n", id="n").result() == [[0, 10], 20]


def test_an_all_inside_a_race_runs_beside_the_other_branches(storage_factory: Opener) -> None:
    barrier = threading.Barrier(3)
    stopped = threading.Event()

    def meet(item: int) -> int:
        barrier.wait(BARRIER_SECONDS)
        return item

    def late(_: Any) -> str:
        barrier.wait(BARRIER_SECONDS)  # in flight beside the all's two branches
        act = current_activity()
        act.cancel_event.wait(BARRIER_SECONDS)
        if act.cancelled:
            stopped.set()
        return "late"

    def body(ctx: Any, _: Any) -> Any:
        both = ctx.all(ctx.run("meet", 1), ctx.run("meet", 2))
        return (yield ctx.race(both, ctx.run("late")))

    flows = {"r": workflow("r").activities(meet=meet, late=late).execute(body)}
    te = make_engine(storage_factory, flows)
    assert list(te.start("r", id="r").result()) == [0, [1, 2]]
    assert stopped.wait(BARRIER_SECONDS)  # the losing branch was told to stop


def test_a_race_inside_an_all_gives_up_its_loser_and_the_all_goes_on(
    storage_factory: Opener,
) -> None:
    barrier = threading.Barrier(3)
    stopped = threading.Event()
    loser_stopped_first = threading.Event()

    def meet(item: int) -> int:
        barrier.wait(BARRIER_SECONDS)
        if item == 2 and stopped.wait(BARRIER_SECONDS):
            loser_stopped_first.set()  # the all's own branch outlived the race's loser
        return item

    def slow(_: Any) -> str:
        barrier.wait(BARRIER_SECONDS)
        act = current_activity()
        act.cancel_event.wait(BARRIER_SECONDS)
        if act.cancelled:
            stopped.set()
        return "slow"

    def body(ctx: Any, _: Any) -> Any:
        once = RetryPolicy(max_attempts=1)
        first = ctx.race(ctx.run("slow", retry=once), ctx.run("meet", 1))
        return (yield ctx.all(first, ctx.run("meet", 2)))

    flows = {"a": workflow("a").activities(meet=meet, slow=slow).execute(body)}
    te = make_engine(storage_factory, flows)
    result = te.start("a", id="a").result()
    assert [list(result[0]), result[1]] == [[1, 1], 2]
    assert loser_stopped_first.is_set()
    loser = keys.branch_slot(keys.branch_slot(keys.step_slot(0), 0), 0)
    assert te.storage.get(keys.op_key("a", loser)) is None  # its late result is void


def test_the_engine_bound_covers_nested_branches(storage_factory: Opener) -> None:
    """Six activities in three inner alls of two, a bound of 3: they meet three at a time,
    across inner alls (one inner all at a time could never gather three)."""
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
        pairs = [ctx.all(ctx.run("work", 2 * i), ctx.run("work", 2 * i + 1)) for i in range(3)]
        return (yield ctx.all(*pairs))

    flows = {"b": workflow("b").activities(work=work).execute(body)}
    te = make_engine(storage_factory, flows, max_parallel_activities=3)
    assert te.start("b", id="b").result() == [[0, 1], [2, 3], [4, 5]]
    assert most == 3


def test_an_inner_max_concurrency_bounds_only_its_own_branches(storage_factory: Opener) -> None:
    lock = threading.Lock()
    in_map, most_in_map = 0, 0
    pair = threading.Barrier(2)
    beside = threading.Event()

    def square(x: int) -> int:
        nonlocal in_map, most_in_map
        with lock:
            in_map += 1
            most_in_map = max(most_in_map, in_map)
        pair.wait(BARRIER_SECONDS)
        if not beside.wait(BARRIER_SECONDS):
            raise RuntimeError("the all's other branch never ran beside the map")
        with lock:
            in_map -= 1
        return x * x

    def other(_: Any) -> str:
        beside.set()
        return "other"

    def body(ctx: Any, _: Any) -> Any:
        squares = ctx.map("square", [1, 2, 3, 4], max_concurrency=2)
        return (yield ctx.all(squares, ctx.run("other")))

    flows = {"m": workflow("m").activities(square=square, other=other).execute(body)}
    te = make_engine(storage_factory, flows)
    assert te.start("m", id="m").result() == [[1, 4, 9, 16], "other"]
    assert most_in_map == 2


def _nested_pairs(ctx: Any, _: Any) -> Any:
    left = ctx.all(ctx.run("work", 0), ctx.run("work", 1))
    right = ctx.all(ctx.run("work", 2), ctx.run("work", 3))
    values = yield ctx.all(left, right)
    yield ctx.sleep(5)
    return values


def test_a_crash_mid_nested_fan_out_reruns_only_unfinished_branches(
    storage_factory: Opener,
) -> None:
    calls: dict[int, int] = {}
    lock = threading.Lock()
    gate = threading.Event()
    first_drive = threading.Barrier(4)

    def work(x: int) -> int:
        with lock:
            calls[x] = calls.get(x, 0) + 1
        if not gate.is_set():
            first_drive.wait(BARRIER_SECONDS)  # all four are in flight, across both alls
            if x != 2:
                gate.wait(BARRIER_SECONDS)  # the right all's first branch is recorded first
        return x + 100

    flows = {"m": workflow("m").activities(work=work).execute(_nested_pairs)}
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
    right = keys.branch_slot(keys.step_slot(0), 1)
    assert recorded == [keys.OP_PREFIX + keys.branch_slot(right, 0)]
    recover_fresh(te, storage_factory)
    te.advance(5)
    assert te.get_handle("m").result() == [[100, 101], [102, 103]]
    assert calls[2] == 1  # the recorded branch never ran again
    assert all(calls[x] == 2 for x in (0, 1, 3))


def test_nested_replay_reads_each_branch_whatever_order_they_finished(
    storage_factory: Opener,
) -> None:
    done_order: list[int] = []
    gates = [threading.Event() for _ in range(4)]

    def work(x: int) -> int:
        if x < 3:
            gates[x].wait(BARRIER_SECONDS)
        done_order.append(x)
        if x > 0:
            gates[x - 1].set()  # finish in the order 3, 2, 1, 0, across the inner alls
        return x * 7

    flows = {"m": workflow("m").activities(work=work).execute(_nested_pairs)}
    te = make_engine(storage_factory, flows)
    te.start("m", id="m")
    assert done_order == [3, 2, 1, 0]
    te.crash()
    te.recover(storage_factory())  # a fresh process replays the alls from their branches
    te.advance(5)
    assert te.get_handle("m").result() == [[0, 7], [14, 21]]
    assert done_order == [3, 2, 1, 0]
