"""Liveness: a drive that fails never strands a run (DESIGN.md, Invariants).

Each test makes one drive fail on a transient storage fault (``FlakyStorage``: the write is
refused with nothing applied, as when SQLite stays busy or DynamoDB's retry budget runs out)
right after the run became drivable, then runs maintenance passes only. The run must finish
within ``WAKE_GRACE`` plus one pass, on every backend, by each way a run becomes drivable:
start, child start, ``start_or_signal``, a signal to a parked run, an update, ``retry``,
``resume``, the middle of a run, and in automatic mode.

Further down: a due timer fires within a bounded number of passes whatever else is due or
retained; a crash leaves a wake-up that maintenance alone acts on; and a delayed start, whose
own timer already covered it, still does (docs/decisions/0009-wake-up-until-parked.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from engine_helpers import T0, Opener, op_records, stored_timers, workflow_keys
from fault_support import FlakyStorage, step_commit

from weft_serverless import Engine, RetryPolicy, current_activity, workflow
from weft_serverless.codec import encode
from weft_serverless.engine.persistence.records import RUNNING, WorkflowState
from weft_serverless.engine.persistence.wakeups import WAKE_GRACE
from weft_serverless.engine.runtime import MAX_TIMERS_PER_PASS
from weft_serverless.errors import InvalidArgumentError, StorageUnavailableError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Op, Put
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine, VirtualClock


def _two_steps(ctx: Any, x: Any) -> Any:
    a = yield ctx.run("a", x)
    b = yield ctx.run("b", a)
    return [a, b]


def _signalled(ctx: Any, _: Any) -> Any:
    got = yield ctx.wait_for_signal("go")
    return (yield ctx.run("a", got))


def _parent(ctx: Any, x: Any) -> Any:
    return (yield ctx.start_child("steps", x))


def _once(ctx: Any, x: Any) -> Any:
    first = yield ctx.run("a", x, retry=RetryPolicy(max_attempts=1))
    return (yield ctx.run("b", first))


def _cart(ctx: Any, _: Any) -> Any:
    items: list[str] = []
    weight: list[int] = []
    ctx.on_update("add", lambda item: items.append(item) or len(items))
    ctx.on_update("weight", lambda grams: weight.append(grams) or sum(weight))
    yield ctx.wait_until(lambda: len(items) >= 1)
    return (yield ctx.run("a", items[0]))


def _sleeper(ctx: Any, _: Any) -> Any:
    yield ctx.sleep("1s")
    return "woke"


ACTIVITIES = {"a": lambda x: f"a({x})", "b": lambda x: f"b({x})"}
WORKFLOWS = {
    name: workflow(name).activities(**ACTIVITIES).execute(body)
    for name, body in {
        "steps": _two_steps,
        "signalled": _signalled,
        "parent": _parent,
        "once": _once,
        "cart": _cart,
        "sleeper": _sleeper,
    }.items()
}


def flaky_engine(storage_factory: Opener, **options: Any) -> tuple[TestEngine, FlakyStorage]:
    storage = FlakyStorage(storage_factory())
    return TestEngine(WORKFLOWS, storage=storage, **options), storage


def assert_stranded_until_grace(te: TestEngine, workflow_id: str, since: float) -> None:
    """Nothing drives the run before its wake-up falls due; the pass at the grace finishes it."""
    te.advance(max(0.0, since + WAKE_GRACE - 1 - te.clock()))
    assert te.describe(workflow_id).status == RUNNING
    te.advance(1)
    assert te.describe(workflow_id).status == "completed"
    te.advance(0)  # a finished child's notice timer (an event's) goes on the next pass
    assert stored_timers(te.storage) == []


@pytest.mark.parametrize("ownership", ["none", "lease", "workflow-lease"])
def test_start_whose_first_drive_fails_is_driven_after_the_grace(
    storage_factory: Opener, ownership: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The start commits, its first step's commit fails: the start returns its handle (the
    write landed; raising would make a retrying caller meet WorkflowAlreadyExistsError), logs
    the failed drive, and the start's wake-up drives the run later."""
    te, storage = flaky_engine(storage_factory, ownership=ownership)
    storage.fail_once(step_commit("w", 1))
    with caplog.at_level(logging.WARNING, "weft_serverless.engine"):
        handle = te.start("steps", 1, id="w")
    assert handle.id == "w"
    assert storage.failures == 1
    assert "workflow w could not be driven now" in caplog.text
    assert te.describe("w").status == RUNNING
    assert_stranded_until_grace(te, "w", T0)
    assert te.describe("w").result == ["a(1)", "b(a(1))"]
    assert keys.WAKE not in workflow_keys(te.storage, "w")


def test_a_run_whose_drive_fails_between_steps_is_driven_after_the_grace(
    storage_factory: Opener,
) -> None:
    """Step 1 committed, step 2's commit fails: the run keeps its wake-up and finishes later."""
    te, storage = flaky_engine(storage_factory)
    storage.fail_once(step_commit("w", 2))
    te.start("steps", 1, id="w")
    assert storage.failures == 1
    assert_stranded_until_grace(te, "w", T0)
    assert te.describe("w").result == ["a(1)", "b(a(1))"]


def test_a_child_whose_first_drive_fails_is_driven_and_wakes_its_parent(
    storage_factory: Opener,
) -> None:
    te, storage = flaky_engine(storage_factory)
    child = "p/" + keys.step_slot(0)
    storage.fail_once(step_commit(child, 1))
    te.start("parent", 2, id="p")
    assert storage.failures == 1
    assert te.describe(child).status == RUNNING
    assert_stranded_until_grace(te, child, T0)
    assert te.describe("p").result == ["a(2)", "b(a(2))"]


def test_start_or_signal_whose_first_drive_fails_is_driven_after_the_grace(
    storage_factory: Opener,
) -> None:
    """Step 1 consumes the buffered signal, step 2's commit fails."""
    te, storage = flaky_engine(storage_factory)
    storage.fail_once(step_commit("w", 2))
    te.start_or_signal("signalled", id="w", signal="go", payload="x")
    assert storage.failures == 1
    assert_stranded_until_grace(te, "w", T0)
    assert te.describe("w").result == "a(x)"


def test_a_signal_whose_drive_fails_after_consuming_it_still_wakes_the_run(
    storage_factory: Opener,
) -> None:
    """The step that consumes the signal keeps its timer as the run's wake-up (it is due)."""
    te, storage = flaky_engine(storage_factory)
    te.start("signalled", id="w")
    storage.fail_once(step_commit("w", 2))
    te.signal("w", "go", "x")  # delivered: the failed drive is logged, not raised
    assert storage.failures == 1
    assert [step["sig"] for step in op_records(te.storage, "w")] == ["signal:go"]
    te.advance(0)
    assert te.describe("w").result == "a(x)"
    assert stored_timers(te.storage) == []
    assert keys.WAKE not in workflow_keys(te.storage, "w")


def test_an_async_completion_whose_drive_fails_returns_and_the_run_finishes_later(
    storage_factory: Opener,
) -> None:
    """The completion is stored with its timer: the call returns and a later pass drives it."""
    te, storage = flaky_engine(storage_factory)
    tokens: list[str] = []
    te.mock("a", impl=lambda x: tokens.append(current_activity().complete_async()))
    te.start("steps", 1, id="w")
    assert te.describe("w").status == RUNNING and len(tokens) == 1
    storage.fail_once(step_commit("w", 1))
    te.complete_activity(tokens[0], "done")
    assert storage.failures == 1
    assert op_records(te.storage, "w") == []
    te.advance(0)
    assert te.describe("w").result == ["done", "b(done)"]


def test_an_update_whose_drive_fails_after_it_applied_still_wakes_the_run(
    storage_factory: Opener,
) -> None:
    te, storage = flaky_engine(storage_factory)
    te.start("cart", id="w")
    storage.fail_once(step_commit("w", 1))
    # The update landed (record and response): it is answered, not raised, so a caller that
    # retries without an update_id does not apply it twice; its wake-up drives the run.
    assert te.update("w", "add", "apple") == 1
    assert storage.failures == 1
    assert len(op_records(te.storage, "w")) == 0
    assert_stranded_until_grace(te, "w", T0)
    assert te.describe("w").result == "a(apple)"


def test_an_update_that_leaves_the_run_parked_arms_no_wake_up(storage_factory: Opener) -> None:
    """Only an update that can let the run move on (a condition it waits on now holds) needs
    a wake-up: any other writes its records in one request, as before wake-ups existed."""
    te, storage = flaky_engine(storage_factory)
    te.start("cart", id="w")
    before = storage.stats.batches + storage.stats.conditional_batches
    assert te.update("w", "weight", 5) == 5  # the condition still waits for an item
    assert storage.stats.batches + storage.stats.conditional_batches == before + 1
    assert keys.WAKE not in workflow_keys(te.storage, "w")
    assert stored_timers(te.storage) == []
    assert te.describe("w").status == RUNNING
    te.update("w", "add", "apple")  # now it holds: the run moves on and finishes
    assert te.describe("w").result == "a(apple)"
    assert stored_timers(te.storage) == []


def test_a_retried_run_whose_drive_fails_is_driven_after_the_grace(
    storage_factory: Opener,
) -> None:
    te, storage = flaky_engine(storage_factory)
    failing = te.mock("a", raises=ValueError("down"))
    te.start("once", 1, id="w")
    assert te.describe("w").status == "failed"
    failing.raises = None
    failing.impl = ACTIVITIES["a"]
    storage.fail_once(step_commit("w", 2))
    te.retry("w")
    assert storage.failures == 1
    assert_stranded_until_grace(te, "w", T0)
    assert te.describe("w").result == "b(a(1))"


def test_a_resumed_run_whose_drive_fails_is_driven_after_the_grace(
    storage_factory: Opener,
) -> None:
    """Suspended while drivable, its start's wake-up spent meanwhile: resume arms a new one."""
    te, storage = flaky_engine(storage_factory)
    storage.fail_once(step_commit("w", 1))
    te.start("steps", 1, id="w")
    te.suspend("w")
    te.advance(WAKE_GRACE)  # the start's wake-up falls due on a suspended run: spent
    assert stored_timers(te.storage) == []
    storage.fail_once(step_commit("w", 1))
    resumed_at = te.clock()
    with pytest.raises(StorageUnavailableError):
        te.resume("w")
    assert_stranded_until_grace(te, "w", resumed_at)


def test_automatic_mode_drives_a_run_whose_background_drive_failed(
    storage_factory: Opener,
) -> None:
    """The background driver swallows the failed drive; its own pass fires the wake-up."""
    clock = VirtualClock()
    storage = FlakyStorage(storage_factory())
    failed = threading.Event()
    first_step = step_commit("w", 1)

    def fail_first_step(ops: Sequence[Op]) -> bool:
        if first_step(ops):
            failed.set()
            return True
        return False

    storage.fail_once(fail_first_step)
    with Engine.create(storage, WORKFLOWS, background_tasks="automatic", clock=clock) as engine:
        handle = engine.start("steps", 1, id="w")
        assert failed.wait(5)
        clock.advance(WAKE_GRACE)
        assert handle.result(timeout=5) == ["a(1)", "b(a(1))"]


def test_a_run_that_parks_or_finishes_inline_leaves_no_wake_up(storage_factory: Opener) -> None:
    """The wake-up goes with the batch that parks or ends the run: nothing fires later."""
    te, _ = flaky_engine(storage_factory)
    te.start("signalled", id="parked")
    te.start("steps", 1, id="done")
    assert keys.WAKE not in workflow_keys(te.storage, "parked")
    assert keys.WAKE not in workflow_keys(te.storage, "done")
    assert stored_timers(te.storage) == []
    report = te.advance(WAKE_GRACE)
    assert (report.timers_fired, report.workflows_driven) == (0, 0)


# -- timers retained by a pass never starve the others ------------------------------------------


def _ids_in_shard(shard: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    n = 0
    while len(found) < count:
        candidate = f"{prefix}-{n}"
        if keys.shard_of(candidate, keys.TIMER_SHARDS) == shard:
            found.append(candidate)
        n += 1
    return found


def _seed_retired_runs(storage: Any, ids: list[str], due: float) -> None:
    """Running runs of a workflow type no engine registers any more, each with a due timer."""
    ops: list[Op] = []
    for workflow_id in ids:
        state = WorkflowState(workflow_id, "retired", "1", RUNNING, encode(None), T0, T0)
        ops.append(Put(keys.state_key(workflow_id), state.to_bytes()))
        timer = keys.timer_key(keys.DEFAULT_SHARDS, due, workflow_id, "s" + keys.step_slot(0))
        ops.append(Put(timer, encode({"wf": workflow_id, "kind": "sleep"})))
    size = storage.capabilities().max_batch_ops
    for start in range(0, len(ops), size):
        storage.batch(ops[start : start + size])


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_retained_timers_past_the_pass_cap_do_not_starve_a_due_sleep(
    storage_factory: Opener, storage_backend: str, ownership: str
) -> None:
    """More than a pass's cap of retained due timers in ONE shard, all earlier than a new
    run's sleep: the sleep still fires within three passes, and no retained timer is lost.

    The cap is the engine's (1,000) on memory and SQLite; on moto it is lowered to 100 to
    keep the run short (a retained run costs a request or two on every backend alike).
    """
    cap = MAX_TIMERS_PER_PASS if storage_backend in ("memory", "sqlite") else 100
    te = TestEngine(WORKFLOWS, storage=storage_factory(), ownership=ownership)
    new_run = _ids_in_shard(0, 1, "fresh")[0]
    retired = _ids_in_shard(0, cap + 5, "retired")
    _seed_retired_runs(te.storage, retired, T0)
    te.start("sleeper", id=new_run)
    te.clock.advance(1)
    reports = []
    while te.describe(new_run).status == RUNNING and len(reports) < 3:
        reports.append(te.run_maintenance(max_timers=cap))
    assert te.describe(new_run).result == "woke"
    assert reports[0].parts["timers_deferred"] == cap
    # Nothing was lost: every retired run still has its timer, moved on for a later engine.
    assert sorted(wf for _, wf in stored_timers(te.storage)) == sorted(retired)


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_a_backlog_due_again_every_pass_does_not_starve_another_shards_timer(
    storage_factory: Opener, ownership: str
) -> None:
    """Passes a minute apart, a cap's worth of retained timers in shard 0 falls due again
    before every pass (its backoff is shorter than the interval): the sleep of a run in
    another shard, due earlier than the backlog's next due time, fires by the second pass.

    A pass reads timers earliest first across the shards. Read shard by shard, every pass
    spent its cap on shard 0 until the backoff outgrew the interval (seven passes here).
    """
    cap = 10
    te = TestEngine(WORKFLOWS, storage=storage_factory(), ownership=ownership)
    new_run = _ids_in_shard(1, 1, "fresh")[0]
    retired = _ids_in_shard(0, cap, "retired")
    _seed_retired_runs(te.storage, retired, T0)
    te.start("sleeper", id=new_run)
    passes = 0
    while te.describe(new_run).status == RUNNING and passes < 2:
        te.clock.advance(60)
        te.run_maintenance(max_timers=cap)
        passes += 1
    assert te.describe(new_run).result == "woke"
    assert sorted(wf for _, wf in stored_timers(te.storage)) == sorted(retired)


def test_retained_copies_of_one_timer_are_deferred_as_one(storage_factory: Opener) -> None:
    """A retained run with two timers of one tag at different due times (a copy left behind):
    a capped pass moves them onto one key as one timer, and the pass goes on to fire the
    others. Moving them as two writes of one key in one batch was refused every pass, so the
    backlog was never moved and starved every timer behind it."""
    cap = 7
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    new_run = _ids_in_shard(1, 1, "fresh")[0]
    retired = _ids_in_shard(0, cap - 1, "retired")
    _seed_retired_runs(te.storage, retired, T0)
    copy = keys.timer_key(keys.DEFAULT_SHARDS, T0 - 0.5, retired[0], "s" + keys.step_slot(0))
    te.storage.put(copy, encode({"wf": retired[0], "kind": "sleep"}))
    te.start("sleeper", id=new_run)
    reports = []
    while te.describe(new_run).status == RUNNING and len(reports) < 3:
        te.clock.advance(60)
        reports.append(te.run_maintenance(max_timers=cap))
    assert reports[0].parts["timers_deferred"] == cap
    assert te.describe(new_run).result == "woke"
    assert sorted(wf for _, wf in stored_timers(te.storage)) == sorted(retired)


def test_a_pass_cap_that_is_not_a_positive_whole_number_is_refused(
    storage_factory: Opener,
) -> None:
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(InvalidArgumentError, match="max_timers"):
            te.run_maintenance(max_timers=bad)  # type: ignore[arg-type]


def test_a_timer_of_a_type_this_engine_does_not_register_is_kept_for_one_that_does(
    storage_factory: Opener,
) -> None:
    """A rolling deploy: an engine without the type leaves the timer; the next one fires it."""
    clock = VirtualClock()
    old = TestEngine(WORKFLOWS, storage=storage_factory(), clock=clock)
    old.start("sleeper", id="w")
    others = {name: d for name, d in WORKFLOWS.items() if name != "sleeper"}
    new = TestEngine(others, storage=storage_factory(), clock=clock)
    report = new.advance(5)
    assert report.parts.get("timers_retained") == 1
    assert old.describe("w").status == RUNNING
    old.run_maintenance()
    assert old.describe("w").result == "woke"


# -- crashes, and paths whose own timer already covered them ------------------------------------


@pytest.mark.parametrize(
    ("workflow_type", "result"),
    [
        pytest.param("steps", ["a(1)", "b(a(1))"], id="after-the-start-batch"),
        pytest.param("signalled", "a(x)", id="after-the-step-consuming-a-signal"),
        pytest.param("cart", "a(apple)", id="after-an-update-releasing-a-condition"),
    ],
)
def test_a_crash_leaves_a_wake_up_that_maintenance_alone_acts_on(
    storage_factory: Opener, workflow_type: str, result: Any
) -> None:
    """No ``recover_all()`` (``recover=False``): only maintenance may move the run on."""
    storage = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=storage, recover=False)
    with pytest.raises(SimulatedCrash):
        if workflow_type == "steps":
            storage.crash_after_write = 1
            te.start("steps", 1, id="w")
        elif workflow_type == "signalled":
            te.start("signalled", id="w")
            storage.crash_after_write = storage.writes + 2  # the signal, then its consumption
            te.signal("w", "go", "x")
        else:
            te.start("cart", id="w")
            te.update("w", "weight", 5)  # leaves the condition waiting: no wake-up needed
            storage.crash_after_write = storage.writes + 1  # the update's own batch
            te.update("w", "add", "apple")
    te.crash()
    storage.crash_after_write = None
    te.recover()
    assert te.describe("w").status == RUNNING
    report = te.advance(WAKE_GRACE)
    assert report.workflows_driven == 1
    assert te.describe("w").result == result


def test_a_delayed_start_whose_first_drive_fails_keeps_its_timer(storage_factory: Opener) -> None:
    te, storage = flaky_engine(storage_factory)
    te.start("steps", 1, id="w", start_after="10s")
    storage.fail_once(step_commit("w", 1))
    report = te.advance(10)
    assert report.parts["timers_retained"] == 1 and te.describe("w").status == RUNNING
    te.advance(0)
    assert te.describe("w").result == ["a(1)", "b(a(1))"]
