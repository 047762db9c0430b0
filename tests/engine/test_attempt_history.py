"""Failed activity attempts: a WARNING each, and a bounded per-step history kept in storage.

The history is the step's retry records (``att#slot#n``), written in the batch that parks the
retry; once a step has failed more than ``ATTEMPT_HISTORY`` times, that batch also deletes the
oldest one. ``describe(attempts=True)`` reads them back, with a failed step's final error.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from engine_helpers import (
    T0,
    Opener,
    WriteLog,
    advance_to,
    make_engine,
    stored_timers,
    workflow_keys,
)

from weft_serverless import RetryPolicy, WorkflowDefinition, workflow
from weft_serverless.engine.persistence.records import ATTEMPT_HISTORY
from weft_serverless.storage import keys
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine


class Flaky(Exception):
    pass


def _noop(value: Any = None) -> Any:
    return value


def _charge(ctx: Any, order: Any) -> Any:
    policy = RetryPolicy(max_attempts=20, initial_backoff=1, backoff_multiplier=1)
    paid = yield ctx.run("charge", order, retry=policy)
    return paid


CHARGE: dict[str, WorkflowDefinition] = {
    "pay": workflow("pay").activities(charge=_noop).execute(_charge)
}


def _fail_first(te: TestEngine, failures: int, message: str = "card service down") -> list[float]:
    times: list[float] = []

    def charge(order: Any) -> Any:
        times.append(te.clock())
        if len(times) <= failures:
            raise Flaky(f"{message} #{len(times)}")
        return {"paid": order}

    te.mock("charge", impl=charge)
    return times


def _attempt_keys(te: TestEngine, workflow_id: str) -> list[str]:
    return [k for k in workflow_keys(te.storage, workflow_id) if k.startswith(keys.ATTEMPT_PREFIX)]


def test_each_failed_attempt_logs_one_structured_warning(
    storage_factory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """Every failed attempt, retried or final, is one WARNING on the engine logger with the
    workflow, type, step, activity, attempt, error and when the next attempt is due."""
    definition = workflow("pay").activities(charge=_noop)

    def two_tries(ctx: Any, order: Any) -> Any:
        return (yield ctx.run("charge", order, retry=RetryPolicy(max_attempts=2)))

    te = make_engine(storage_factory, {"pay": definition.execute(two_tries)})
    _fail_first(te, 5)
    caplog.set_level(logging.WARNING, logger="weft_serverless.engine")
    te.start("pay", 7, id="p")
    advance_to(te, T0 + 1)
    records = [r for r in caplog.records if getattr(r, "activity", None) == "charge"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]
    fields = [
        {
            name: getattr(r, name)
            for name in (
                "workflow_id",
                "workflow_type",
                "step",
                "attempt",
                "error_type",
                "error_message",
                "next_retry_at",
            )
        }
        for r in records
    ]
    base = {"workflow_id": "p", "workflow_type": "pay", "step": "1", "error_type": "Flaky"}
    assert fields == [
        {**base, "attempt": 1, "error_message": "card service down #1", "next_retry_at": T0 + 1},
        {**base, "attempt": 2, "error_message": "card service down #2", "next_retry_at": None},
    ]
    assert "attempt 1" in records[0].getMessage() and "Flaky" in records[0].getMessage()


def test_earlier_failures_of_a_step_that_succeeded_stay_visible(storage_factory: Opener) -> None:
    """After the step succeeds its two failed attempts are still described, with their
    error, time and the time the next attempt was due; a plain describe reads only state."""
    te = make_engine(storage_factory, CHARGE)
    _fail_first(te, 2)
    handle = te.start("pay", "o-1", id="p")
    advance_to(te, T0 + 1)
    advance_to(te, T0 + 2)
    assert handle.result() == {"paid": "o-1"}
    assert te.describe("p").failed_attempts is None
    described = te.describe("p", attempts=True)
    assert described.input == "o-1"
    rows = [dict(row) for row in described.failed_attempts or ()]
    tracebacks = [row.pop("traceback") for row in rows]
    assert rows == [
        {
            "step": "1",
            "slot": keys.step_slot(0),
            "activity": "charge",
            "attempt": n,
            "error_type": "Flaky",
            "message": f"card service down #{n}",
            "failed_at": T0 + n - 1,
            "retry_at": T0 + n,
            "started_at": T0 + n - 1,
            "after_retries": 0,
        }
        for n in (1, 2)
    ]
    for n, text in enumerate(tracebacks, 1):  # from the activity's frame to its error
        assert text.splitlines()[1].endswith(", in charge")
        assert text.endswith(f"Flaky: card service down #{n}\n")


def test_final_failure_is_part_of_the_history(storage_factory: Opener) -> None:
    """A step that fails for good shows its retried attempts and the final one (no retry)."""
    definition = workflow("pay").activities(charge=_noop)

    def two_tries(ctx: Any, order: Any) -> Any:
        return (yield ctx.run("charge", order, retry=RetryPolicy(max_attempts=2)))

    te = make_engine(storage_factory, {"pay": definition.execute(two_tries)})
    _fail_first(te, 5)
    te.start("pay", 7, id="p")
    advance_to(te, T0 + 1)
    failures = te.describe("p", attempts=True).failed_attempts or ()
    assert [(f["attempt"], f["message"], f["retry_at"]) for f in failures] == [
        (1, "card service down #1", T0 + 1),
        (2, "card service down #2", None),
    ]
    assert failures[1]["failed_at"] == T0 + 1


def test_history_keeps_the_newest_attempts_with_bounded_messages(storage_factory: Opener) -> None:
    """13 failures then success: the newest 10 retry records remain (attempts 4 to 13), the
    step records attempt 14, and a huge message is cut to a bounded size."""
    te = make_engine(storage_factory, CHARGE)
    _fail_first(te, 13, message="x" * 5000)
    handle = te.start("pay", 1, id="p")
    assert len(_attempt_keys(te, "p")) == 1
    for second in range(1, 14):
        advance_to(te, T0 + second)
        assert len(_attempt_keys(te, "p")) == min(second + 1, 13, ATTEMPT_HISTORY)
    assert handle.result() == {"paid": 1}
    failures = te.describe("p", attempts=True).failed_attempts or ()
    assert [f["attempt"] for f in failures] == list(range(4, 14))
    assert all(len(f["message"]) < 1100 for f in failures)
    assert failures[0]["message"].endswith("more characters]")
    assert _attempt_keys(te, "p") == [
        f"{keys.ATTEMPT_PREFIX}{keys.step_slot(0)}#{n:04d}" for n in range(4, 14)
    ]


def _run_to_end(store: CrashingStorage, storage_factory: Opener, wf_id: str, failures: int) -> Any:
    """Start ``wf_id`` and advance a second at a time; on a crash, recover on a fresh handle
    of the store and carry on. Returns (engine, call times)."""
    te = TestEngine(CHARGE, storage=store)
    times = _fail_first(te, failures)
    second = 0
    started = False
    while second <= failures + 1:
        try:
            if not started:
                te.start("pay", 1, id=wf_id, idempotency_key=wf_id)  # a client retries it
                started = True
            advance_to(te, T0 + second)
            second += 1
        except SimulatedCrash:
            te.crash()
            te.recover(storage=storage_factory())  # the mock stays in place
    te.run_maintenance()
    return te, times


def test_crash_at_every_write_of_a_long_retry_keeps_count_and_history(
    storage_factory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crash before and after each write while a step fails past the history bound: the run
    still ends with its result, the newest recorded failures as history, and no timer left.
    The bound is lowered to 2 (4 failures) so every crash point stays cheap on every backend."""
    from weft_serverless.engine.steps import activities as run_step

    bound, failures = 2, 4
    monkeypatch.setattr(run_step, "ATTEMPT_HISTORY", bound)
    reference_store = WriteLog(storage_factory())
    reference, times = _run_to_end(reference_store, storage_factory, "ref", failures)
    assert reference.get_handle("ref").result() == {"paid": 1}
    assert len(times) == failures + 1
    newest = list(range(failures - bound + 1, failures + 1))
    history = reference.describe("ref", attempts=True).failed_attempts or ()
    assert [f["attempt"] for f in history] == newest
    problems: list[str] = []
    for write in range(1, reference_store.writes + 1):
        for option in ("crash_before_write", "crash_after_write"):
            wf_id = f"{option}-{write}"
            store = CrashingStorage(storage_factory(), **{option: write})
            te, times = _run_to_end(store, storage_factory, wf_id, failures)
            description = te.describe(wf_id, attempts=True)
            got = [f["attempt"] for f in description.failed_attempts or ()]
            if description.status != "completed" or description.result != {"paid": 1}:
                problems.append(f"{wf_id}: ended {description.status}")
            # A crash before a retry's write loses that failure: the attempt runs again under
            # its number, so the history ends one attempt earlier.
            if got not in (newest, [n - 1 for n in newest]):
                problems.append(f"{wf_id}: history {got}")
            if len(times) not in (failures + 1, failures + 2):
                problems.append(f"{wf_id}: {len(times)} calls")
            if stored_timers(te.storage):
                problems.append(f"{wf_id}: timers left {stored_timers(te.storage)}")
    assert not problems, "\n".join(problems)
