"""Crash injection and recovery: a crash at any storage write loses nothing and repeats nothing.

The matrix runs a 5-step workflow (run, sleep, run, wait_for_signal, run) driven by a client
that retries its calls the safe way (start with an idempotency key, signals with a signal id,
maintenance at an absolute time). For every write the crash-free run makes, it crashes just
before and just after that write, recovers in a fresh engine on a fresh storage handle (a
process restart), finishes the scenario, and checks the outcome against the crash-free run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from engine_helpers import (
    T0,
    Opener,
    WriteLog,
    advance_to,
    buffered_signals,
    op_records,
    op_signatures,
    stored_timers,
)

from weft_serverless import (
    NondeterminismError,
    WorkflowFailedError,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine


def _noop(value: Any = None) -> Any:
    return value


def five_steps(ctx: Any, value: int) -> Any:
    a = yield ctx.run("a", value)
    yield ctx.sleep("10s")
    b = yield ctx.run("b", a)
    approval = yield ctx.wait_for_signal("go")
    c = yield ctx.run("c", [b, approval])
    return c


FIVE = workflow("five").activities(a=_noop, b=_noop, c=_noop).execute(five_steps)
FIVE_SIGNATURES = ["run:a", "sleep", "run:b", "signal:go", "run:c"]
ACTIVITY_OF_SLOT = {keys.step_slot(0): "a", keys.step_slot(2): "b", keys.step_slot(4): "c"}

Action = Callable[[TestEngine, str], None]


def start(te: TestEngine, wf_id: str) -> None:
    te.start("five", 4, id=wf_id, idempotency_key=wf_id)


def send_go(te: TestEngine, wf_id: str) -> None:
    te.signal(wf_id, "go", {"by": "alice"}, signal_id=f"{wf_id}:go")


def wake_sleep(te: TestEngine, wf_id: str) -> None:
    advance_to(te, T0 + 10)


# Signal buffered during the sleep (consumed later by a timer-driven drive), or sent once the
# workflow already waits (consumed by the signal call's inline drive).
SCENARIOS: dict[str, list[Action]] = {
    "signal-while-sleeping": [start, send_go, wake_sleep],
    "signal-while-waiting": [start, wake_sleep, send_go],
}


def install_mocks(te: TestEngine) -> None:
    te.mock("a", impl=lambda x: x + 1)
    te.mock("b", impl=lambda x: x * 10)
    te.mock("c", impl=lambda pair: {"b": pair[0], "approval": pair[1]})


@dataclass
class CaseOutcome:
    crashed: bool
    status: str
    result: Any
    calls: dict[str, int]
    ops: list[dict[str, Any]]
    buffered: list[Any]
    timers: list[tuple[float, str]]


def run_case(
    storage_factory: Opener,
    wf_id: str,
    actions: Sequence[Action],
    store: CrashingStorage,
) -> CaseOutcome:
    """Run the client's actions; on a crash recover in a fresh engine and redo from the crash."""
    te = TestEngine({"five": FIVE}, storage=store)
    install_mocks(te)
    crashed_at: int | None = None
    for index, action in enumerate(actions):
        try:
            action(te, wf_id)
        except SimulatedCrash:
            crashed_at = index
            break
    if crashed_at is not None:
        te.crash()
        te.recover(storage=CrashingStorage(storage_factory()))
        # The crashed call is retried: a resent signal with the same signal_id is a no-op even
        # when recovery already finished the run.
        for action in actions[crashed_at:]:
            action(te, wf_id)
    te.run_maintenance()  # one more pass collects any timer a crash left behind
    description = te.describe(wf_id)
    return CaseOutcome(
        crashed=crashed_at is not None,
        status=description.status,
        result=description.result,
        calls={name: mock.call_count for name, mock in te.mocks.items()},
        ops=op_records(te.storage, wf_id, branches=True),
        buffered=buffered_signals(te.storage, wf_id),
        timers=stored_timers(te.storage),
    )


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_crash_before_and_after_every_write_recovers_to_the_same_result(
    storage_factory: Opener, scenario: str
) -> None:
    """Crash at each write (before and after): same result, each activity once (twice at most
    for the step whose commit was cut), no duplicated step, no leftover signal or timer."""
    actions = SCENARIOS[scenario]
    reference_store = WriteLog(storage_factory())
    reference = run_case(storage_factory, f"ref-{scenario}", actions, reference_store)
    assert not reference.crashed
    assert reference.status == "completed"
    assert reference.result == {"b": 50, "approval": {"by": "alice"}}
    assert reference.calls == {"a": 1, "b": 1, "c": 1}
    assert [op["sig"] for op in reference.ops] == FIVE_SIGNATURES
    assert reference.buffered == []
    assert reference.timers == []
    total_writes = reference_store.writes
    assert total_writes >= 8, f"the scenario should write at least once per step: {total_writes}"

    def slot_commits(write: int) -> set[str]:
        """The activity whose op record write number ``write`` carries, if any."""
        prefix = keys.workflow_partition(f"ref-{scenario}")
        return {
            ACTIVITY_OF_SLOT[key.sort[len(keys.OP_PREFIX) :]]
            for key in reference_store.puts(write)
            if key.partition == prefix
            and key.sort.startswith(keys.OP_PREFIX)
            and key.sort[len(keys.OP_PREFIX) :] in ACTIVITY_OF_SLOT
        }

    failures: list[str] = []
    for write in range(1, total_writes + 1):
        for when in ("before", "after"):
            wf_id = f"{scenario}-{when}-{write}"
            option = "crash_before_write" if when == "before" else "crash_after_write"
            store = CrashingStorage(storage_factory(), **{option: write})
            try:
                got = run_case(storage_factory, wf_id, actions, store)
            except Exception as exc:  # report every failing crash point at once
                failures.append(f"{when} write {write}: {type(exc).__name__}: {exc}")
                continue
            expected_calls = {"a": 1, "b": 1, "c": 1}
            if when == "before":
                for name in slot_commits(write):
                    expected_calls[name] = 2  # ran, then its commit was cut: runs once more
            problems = []
            if not got.crashed:
                problems.append("the crash never happened")
            if got.status != "completed" or got.result != reference.result:
                problems.append(f"ended {got.status} with {got.result!r}")
            if got.calls != expected_calls:
                problems.append(f"calls {got.calls}, expected {expected_calls}")
            if got.ops != reference.ops:
                problems.append(f"op log {got.ops} differs from {reference.ops}")
            if got.buffered:
                problems.append(f"signals left buffered: {got.buffered}")
            if got.timers:
                problems.append(f"timers left: {got.timers}")
            if problems:
                failures.append(f"{when} write {write}: " + "; ".join(problems))
    assert not failures, "\n".join(failures)


def test_recovery_answers_completed_steps_from_the_op_log(storage_factory: Opener) -> None:
    """A fresh engine re-runs the generator but answers recorded steps without re-running them."""
    te = TestEngine({"five": FIVE}, storage=storage_factory())
    install_mocks(te)
    start(te, "wf")
    wake_sleep(te, "wf")
    assert op_signatures(te.storage, "wf") == FIVE_SIGNATURES[:3]
    te.crash()
    te.recover(storage=storage_factory())
    assert te.describe("wf").status == "running"
    assert {name: mock.call_count for name, mock in te.mocks.items()} == {"a": 1, "b": 1, "c": 0}
    send_go(te, "wf")
    assert te.get_handle("wf").result() == {"b": 50, "approval": {"by": "alice"}}
    assert {name: mock.call_count for name, mock in te.mocks.items()} == {"a": 1, "b": 1, "c": 1}


def test_sleep_survives_a_crash_without_restarting_or_shortening(storage_factory: Opener) -> None:
    """A sleep parked before a crash fires at its original due time after recovery."""
    te = TestEngine({"five": FIVE}, storage=storage_factory())
    install_mocks(te)
    start(te, "wf")
    te.clock.advance(6)
    te.crash()
    te.recover(storage=storage_factory())
    advance_to(te, T0 + 10 - 0.001)
    assert op_signatures(te.storage, "wf") == ["run:a"]
    advance_to(te, T0 + 10)
    assert op_signatures(te.storage, "wf") == ["run:a", "sleep", "run:b"]


def _nd_v1(ctx: Any, _: Any) -> Any:
    first = yield ctx.run("a", 1)
    yield ctx.sleep("1m")
    second = yield ctx.run("b", first)
    return (yield ctx.wait_for_signal("end")), second


def _nd_renamed_activity(ctx: Any, _: Any) -> Any:
    first = yield ctx.run("b", 1)
    yield ctx.sleep("1m")
    second = yield ctx.run("b", first)
    return (yield ctx.wait_for_signal("end")), second


def _nd_changed_kind(ctx: Any, _: Any) -> Any:
    first = yield ctx.run("a", 1)
    yield ctx.wait_for_signal("late")
    second = yield ctx.run("b", first)
    return (yield ctx.wait_for_signal("end")), second


def _nd_changed_later(ctx: Any, _: Any) -> Any:
    first = yield ctx.run("a", 1)
    yield ctx.sleep("1m")
    second = yield ctx.all(ctx.run("b", first))
    return (yield ctx.wait_for_signal("end")), second


def _nd_same_steps(ctx: Any, _: Any) -> Any:
    first = yield ctx.run("a", 1)
    ctx.log.info("code between steps may change freely")
    yield ctx.sleep("1m")
    second = yield ctx.run("b", first)
    return (yield ctx.wait_for_signal("end")), second + 100


def _other(ctx: Any, _: Any) -> Any:
    yield ctx.sleep("1m")
    yield ctx.sleep("1m")
    return "other done"


ND_ACTIVITIES = {"a": _noop, "b": _noop}


@pytest.mark.parametrize(
    ("changed", "step", "stored", "current"),
    [
        (_nd_renamed_activity, "1", "run:a", "run:b"),
        (_nd_changed_kind, "2", "sleep", "signal:late"),
        (_nd_changed_later, "3", "run:b", "all(run:b)"),
    ],
    ids=["activity-renamed", "step-kind-changed", "wrapped-in-all"],
)
def test_changed_step_signature_fails_the_run_naming_step_and_both_signatures(
    storage_factory: Opener, changed: Any, step: str, stored: str, current: str
) -> None:
    """Recovery under changed code fails that run with NondeterminismError naming the step
    (counted from 1) and both signatures; other runs go on."""
    v1 = {
        "nd": workflow("nd").activities(**ND_ACTIVITIES).execute(_nd_v1),
        "other": workflow("other").execute(_other),
    }
    te = TestEngine(v1, storage=storage_factory())
    a = te.mock("a", returns=1)
    b = te.mock("b", returns=2)
    te.start("nd", id="nd")
    te.start("other", id="other")
    te.advance(60)  # nd: steps 0-2 recorded, parked at the signal; other: in its second sleep
    assert op_signatures(te.storage, "nd") == ["run:a", "sleep", "run:b"]
    te.crash()
    te.workflows["nd"] = workflow("nd").activities(**ND_ACTIVITIES).execute(changed)
    te.recover(storage=storage_factory())

    description = te.describe("nd")
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "NondeterminismError"
    message = description.error["message"]
    assert f"step {step}:" in message
    assert repr(stored) in message and repr(current) in message
    with pytest.raises(WorkflowFailedError) as info:
        te.get_handle("nd").result()
    assert info.value.error_type == "NondeterminismError"
    assert (a.call_count, b.call_count) == (1, 1)  # nothing re-ran, nothing new ran

    te.advance(60)
    assert te.get_handle("other").result() == "other done"
    assert te.describe("nd").status == "failed"


def test_unchanged_step_sequence_replays_without_nondeterminism(storage_factory: Opener) -> None:
    """Changed plain code around unchanged durable steps recovers and completes normally."""
    te = TestEngine(
        {"nd": workflow("nd").activities(**ND_ACTIVITIES).execute(_nd_v1)},
        storage=storage_factory(),
    )
    a = te.mock("a", returns=1)
    b = te.mock("b", impl=lambda x: x + 1)
    te.start("nd", id="nd")
    te.advance(60)
    te.crash()
    te.workflows["nd"] = workflow("nd").activities(**ND_ACTIVITIES).execute(_nd_same_steps)
    te.recover(storage=storage_factory())
    te.signal("nd", "end", "bye")
    assert te.get_handle("nd").result() == ("bye", 102)
    assert (a.call_count, b.call_count) == (1, 1)


def test_nondeterminism_error_names_step_and_signatures() -> None:
    """The error's fields and message carry the step and both signatures."""
    error = NondeterminismError("3", "run:a", "sleep")
    assert (error.step, error.stored, error.current, error.code) == (
        "3",
        "run:a",
        "sleep",
        "NondeterminismError",
    )
    assert "step 3" in str(error) and "'run:a'" in str(error) and "'sleep'" in str(error)
