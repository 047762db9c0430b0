"""Signals: buffered until waited for, deduplicated by id, durable, consumed with their step."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import (
    T0,
    Opener,
    WriteLog,
    advance_to,
    buffered_signals,
    make_engine,
    op_signatures,
    stored_timers,
)

from weft_serverless import (
    InvalidArgumentError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine


def _sleep_then_wait(ctx: Any, _: Any) -> Any:
    yield ctx.sleep("10s")
    return (yield ctx.wait_for_signal("go"))


def _wait_twice(ctx: Any, _: Any) -> Any:
    first = yield ctx.wait_for_signal("go")
    second = yield ctx.wait_for_signal("go", timeout="1m")
    return [first, second]


def _sleep_then_wait_twice(ctx: Any, _: Any) -> Any:
    yield ctx.sleep("10s")
    first = yield ctx.wait_for_signal("go")
    second = yield ctx.wait_for_signal("go")
    return [first, second]


def _wait_with_timeout(ctx: Any, _: Any) -> Any:
    first = yield ctx.wait_for_signal("go", timeout="30s")
    second = yield ctx.wait_for_signal("go")
    return [first, second]


WORKFLOWS = {
    "sleep_then_wait": workflow("sleep_then_wait").execute(_sleep_then_wait),
    "wait_twice": workflow("wait_twice").execute(_wait_twice),
    "sleep_then_wait_twice": workflow("sleep_then_wait_twice").execute(_sleep_then_wait_twice),
    "wait_with_timeout": workflow("wait_with_timeout").execute(_wait_with_timeout),
}


def test_signal_sent_before_the_wait_is_buffered_then_received(storage_factory: Opener) -> None:
    """A signal arriving while the run sleeps waits in the store until the run asks for it."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("sleep_then_wait", id="w")
    te.clock.advance(1)
    te.signal("w", "go", {"n": 1})
    assert buffered_signals(te.storage, "w") == [{"n": 1}]
    assert op_signatures(te.storage, "w") == []
    advance_to(te, T0 + 10)
    assert handle.result() == {"n": 1}
    assert buffered_signals(te.storage, "w") == []
    assert op_signatures(te.storage, "w") == ["sleep", "signal:go"]


def test_signal_to_a_waiting_run_drives_it_inline(storage_factory: Opener) -> None:
    """In manual mode ``signal`` drives the woken run to its next park or its end."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("wait_twice", id="w")
    assert te.describe("w").status == "running"
    te.signal("w", "go", "first")
    assert op_signatures(te.storage, "w") == ["signal:go"]
    te.signal("w", "go", "second")
    assert handle.result() == ["first", "second"]


def test_signals_of_one_name_are_received_in_order(storage_factory: Opener) -> None:
    """Buffered signals of one name are consumed first-in first-out; the rest stay buffered."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("sleep_then_wait_twice", id="w")
    for n in range(3):
        te.signal("w", "go", n)
    assert buffered_signals(te.storage, "w") == [0, 1, 2]
    advance_to(te, T0 + 10)
    assert handle.result() == [0, 1]
    assert buffered_signals(te.storage, "w") == [2]


def test_wait_receives_only_signals_of_its_name(storage_factory: Opener) -> None:
    """A signal of another name neither wakes the wait nor is consumed by it."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("wait_twice", id="w")
    te.signal("w", "other", "x")
    te.advance(1)
    assert op_signatures(te.storage, "w") == []
    assert buffered_signals(te.storage, "w", "other") == ["x"]
    te.signal("w", "go", "a")
    te.signal("w", "go", "b")
    assert handle.result() == ["a", "b"]
    assert buffered_signals(te.storage, "w") == ["x"]


def test_resent_signal_id_is_a_no_op_while_buffered(storage_factory: Opener) -> None:
    """The same ``signal_id`` sent twice before the wait is buffered once."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("sleep_then_wait", id="w")
    te.signal("w", "go", "once", signal_id="s-1")
    te.signal("w", "go", "once", signal_id="s-1")
    te.signal("w", "go", "changed payload", signal_id="s-1")
    assert buffered_signals(te.storage, "w") == ["once"]
    advance_to(te, T0 + 10)
    assert handle.result() == "once"


def test_resent_signal_id_is_a_no_op_after_it_was_consumed(storage_factory: Opener) -> None:
    """A resend after the wait consumed the signal is not delivered a second time."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("wait_twice", id="w")
    te.signal("w", "go", "only", signal_id="s-1")
    assert op_signatures(te.storage, "w") == ["signal:go"]
    te.signal("w", "go", "only", signal_id="s-1")
    assert buffered_signals(te.storage, "w") == []
    advance_to(te, T0 + 60)
    assert handle.result() == ["only", None]


def test_distinct_signal_ids_are_all_delivered(storage_factory: Opener) -> None:
    """Deduplication is per id: two ids, two signals."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("wait_twice", id="w")
    te.signal("w", "go", 1, signal_id="s-1")
    te.signal("w", "go", 2, signal_id="s-2")
    assert handle.result() == [1, 2]


def test_buffered_signal_and_its_dedup_survive_a_crash(storage_factory: Opener) -> None:
    """After a restart the buffered signal is still received, and its id still deduplicates."""
    te = make_engine(storage_factory, WORKFLOWS)
    te.start("wait_twice", id="w")
    te.signal("w", "other", "keep", signal_id="s-0")
    te.crash()
    te.recover(storage=storage_factory())
    assert buffered_signals(te.storage, "w", "other") == ["keep"]
    te.signal("w", "other", "keep", signal_id="s-0")
    assert buffered_signals(te.storage, "w", "other") == ["keep"]
    te.signal("w", "go", "first", signal_id="s-1")
    te.crash()
    te.recover(storage=storage_factory())
    te.signal("w", "go", "first", signal_id="s-1")
    advance_to(te, T0 + 60)
    assert te.get_handle("w").result() == ["first", None]


def test_signal_is_consumed_in_the_same_commit_as_its_step(storage_factory: Opener) -> None:
    """The write recording the wait's result also deletes the buffered signal; a crash just
    before or just after it leaves the signal either fully pending or fully consumed."""
    reference = WriteLog(storage_factory())
    te = TestEngine(WORKFLOWS, storage=reference)
    te.start("wait_twice", id="ref")
    te.signal("ref", "go", "p", signal_id="sig")
    advance_to(te, T0 + 60)
    assert te.get_handle("ref").result() == ["p", None]
    op_key = keys.op_key("ref", keys.step_slot(0))
    consuming = reference.write_putting(op_key)
    deleted = reference.deletes(consuming)
    assert any(key.sort.startswith(keys.signal_prefix("go")) for key in deleted), deleted

    for when in ("before", "after"):
        wf_id = f"w-{when}"
        option = "crash_before_write" if when == "before" else "crash_after_write"
        store = CrashingStorage(storage_factory(), **{option: consuming})
        te = TestEngine(WORKFLOWS, storage=store)
        te.start("wait_twice", id=wf_id)
        with pytest.raises(SimulatedCrash):
            te.signal(wf_id, "go", "p", signal_id="sig")
        if when == "before":
            assert op_signatures(store, wf_id) == []
            assert buffered_signals(store, wf_id) == ["p"]
        else:
            assert op_signatures(store, wf_id) == ["signal:go"]
            assert buffered_signals(store, wf_id) == []
        te.crash()
        te.recover(storage=storage_factory())
        assert op_signatures(te.storage, wf_id) == ["signal:go"]
        assert buffered_signals(te.storage, wf_id) == []
        advance_to(te, T0 + 60)
        assert te.get_handle(wf_id).result() == ["p", None]


def test_wait_timeout_returns_none_at_due_not_before(storage_factory: Opener) -> None:
    """A wait with a timeout yields None exactly at the timeout; a later signal stays for the
    next wait."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("wait_with_timeout", id="w")
    advance_to(te, T0 + 30 - 0.001)
    assert op_signatures(te.storage, "w") == []
    advance_to(te, T0 + 30)
    assert op_signatures(te.storage, "w") == ["signal:go"]
    te.signal("w", "go", "late")
    assert handle.result() == [None, "late"]


def test_signal_before_the_timeout_cancels_the_timeout_timer(storage_factory: Opener) -> None:
    """A wait that receives its signal in time removes its timeout timer; the timeout never
    fires later."""
    te = make_engine(storage_factory, WORKFLOWS)
    handle = te.start("wait_with_timeout", id="w")
    assert [wf for _, wf in stored_timers(te.storage)] == ["w"]
    te.clock.advance(5)
    te.signal("w", "go", "in time")
    te.advance(0)
    assert stored_timers(te.storage) == []
    report = advance_to(te, T0 + 31)
    assert report.timers_fired == 0
    te.signal("w", "go", "second")
    assert handle.result() == ["in time", "second"]


def test_signal_to_unknown_or_finished_run_is_refused_without_writing(
    storage_factory: Opener,
) -> None:
    """Unknown id: WorkflowNotFoundError; finished run: WorkflowNotRunningError; no write."""
    store = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=store)
    handle = te.start("wait_twice", id="w")
    te.signal("w", "go", 1)
    te.signal("w", "go", 2)
    assert handle.result() == [1, 2]
    writes = store.writes
    with pytest.raises(WorkflowNotFoundError) as missing:
        te.signal("nope", "go", 1)
    assert missing.value.code == "WorkflowNotFoundError"
    assert missing.value.workflow_id == "nope"
    with pytest.raises(WorkflowNotRunningError) as finished:
        te.signal("w", "go", 3)
    assert finished.value.code == "WorkflowNotRunningError"
    assert finished.value.status == "completed"
    assert store.writes == writes


@pytest.mark.parametrize(
    ("name", "signal_id"),
    [("", None), (None, None), ("go", ""), ("go", "x" * 129), ("go", 7)],
    ids=["empty-name", "no-name", "empty-id", "long-id", "int-id"],
)
def test_bad_signal_name_or_id_is_refused_without_writing(
    storage_factory: Opener, name: Any, signal_id: Any
) -> None:
    """A bad signal name or id is an InvalidArgumentError and writes nothing."""
    store = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=store)
    te.start("wait_twice", id="w")
    writes = store.writes
    with pytest.raises(InvalidArgumentError) as info:
        te.signal("w", name, 1, signal_id=signal_id)
    assert info.value.code == "InvalidArgumentError"
    assert store.writes == writes


def test_resent_signal_id_after_the_run_finished_is_a_no_op(storage_factory: Opener) -> None:
    """A client retrying a delivered signal (its answer lost) must not get an error, even if
    the signal already finished the run."""
    te = make_engine(storage_factory, {"sleep_then_wait": WORKFLOWS["sleep_then_wait"]})
    handle = te.start("sleep_then_wait", id="w")
    advance_to(te, T0 + 10)
    te.signal("w", "go", "done", signal_id="s-1")
    assert handle.result() == "done"
    te.signal("w", "go", "done", signal_id="s-1")
    assert handle.result() == "done"


def _wait_for_each(ctx: Any, names: list[str]) -> Any:
    yield ctx.sleep("1s")
    received = []
    for name in names:
        received.append((yield ctx.wait_for_signal(name)))
    return received


def test_signal_names_with_separators_and_unicode_stay_distinct(storage_factory: Opener) -> None:
    """Names that look alike once escaped ('a', 'a#b', 'a%23b', unicode, spaces) are
    buffered and received separately."""
    names = ["a", "a#b", "a%23b", "ünï cødé", "x/y z"]
    te = make_engine(storage_factory, {"each": workflow("each").execute(_wait_for_each)})
    handle = te.start("each", list(reversed(names)), id="w")
    for name in names:
        te.signal("w", name, f"payload of {name}")
    for name in names:
        assert buffered_signals(te.storage, "w", name) == [f"payload of {name}"]
    advance_to(te, T0 + 1)
    assert handle.result() == [f"payload of {name}" for name in reversed(names)]
