"""A retry of a failed run keeps its history (ADR 0044): the failure it retries, the failed
step and its attempts stay in the events and in ``describe(attempts=True)`` with the ids and
numbers they had, the retry is an event of its own, the step it runs again starts afresh
with its attempts numbered on, a step's duration counts from the retry, and each failed
attempt keeps where it raised (a traceback of at most ``MAX_TRACEBACK_BYTES``).
"""

from __future__ import annotations

from typing import Any

from feature_support import Opener, make_engine

from weft_serverless import RetryPolicy, inspect_workflow, workflow
from weft_serverless.console.timeline import read_run
from weft_serverless.engine.persistence.tracebacks import MAX_TRACEBACK_BYTES, bounded
from weft_serverless.storage import keys
from weft_serverless.testing import DEFAULT_START, TestEngine

T0 = DEFAULT_START


class Declined(Exception):
    pass


def _engine(storage_factory: Opener) -> tuple[TestEngine, set[str]]:
    """A run that prepares, then charges (2 attempts a round, 1 s apart) while ``broken``."""
    broken = {"charge"}

    def charge(_: Any) -> str:
        if "charge" in broken:
            raise Declined("card declined")
        return "paid"

    def flow(ctx: Any, _: Any) -> Any:
        yield ctx.run("prepare")
        return (yield ctx.run("charge", retry=RetryPolicy(max_attempts=2, initial_backoff=1)))

    flows = {"pay": workflow("pay").activities(prepare=lambda: None, charge=charge).execute(flow)}
    return make_engine(storage_factory, flows), broken


def test_a_retry_keeps_the_failure_and_is_an_event(storage_factory: Opener) -> None:
    te, broken = _engine(storage_factory)
    te.start("pay", id="r")
    te.advance(1)  # attempt 2 fails for good: the run fails at T0 + 1
    before = te.engine.events("r")
    assert [e["type"] for e in before][-3:] == [
        "activity.attempt_failed",
        "step.failed",
        "run.failed",
    ]
    te.advance(99)  # the run sits failed 99 s
    broken.clear()
    te.retry("r")
    assert te.get_handle("r").result() == "paid"
    after = te.engine.events("r")
    kept = {e["event_id"] for e in before}
    assert [e for e in after if e["event_id"] in kept] == before  # nothing erased, ids kept
    added = [e for e in after if e["event_id"] not in kept]
    assert [e["type"] for e in added] == ["run.retried", "step.completed", "run.completed"]
    retried = added[0]
    assert (retried["at"], retried["step"], retried["retry"]) == (T0 + 100, "2", 1)
    assert retried["error"]["type"] == "ActivityFailedError"
    assert added[1]["attempt"] == 3  # numbered on after the two that failed
    ids = [e["event_id"] for e in after]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_the_step_run_again_starts_afresh_and_its_attempts_are_numbered_on(
    storage_factory: Opener,
) -> None:
    """Retried in the millisecond it failed, the step gets a fresh retry policy (two more
    attempts), every attempt keeps its number, and every event its own id."""
    te, _ = _engine(storage_factory)
    te.start("pay", id="r")
    te.advance(1)
    te.retry("r")  # at T0 + 1, the instant of the failure: attempt 3 fails at once
    te.advance(1)  # attempt 4, the second of this round, fails for good
    assert te.describe("r").status == "failed"
    te.retry("r")  # attempt 5 fails; its retry is due in 1 s
    rows = te.describe("r", attempts=True).failed_attempts or ()
    numbered = [(row["attempt"], row["after_retries"], row["retry_at"]) for row in rows]
    assert numbered == [
        (1, 0, T0 + 1),
        (2, 0, T0 + 1),  # its retry_at: the retry of the run that ran the step again
        (3, 1, T0 + 2),
        (4, 1, T0 + 2),
        (5, 2, T0 + 3),
    ]
    assert all(row["traceback"].endswith("Declined: card declined\n") for row in rows)
    events = te.engine.events("r")
    ids = [e["event_id"] for e in events]
    assert len(set(ids)) == len(ids) == len(events)
    assert [e["type"] for e in events].count("run.failed") == 2
    assert [e["retry"] for e in events if e["type"] == "run.retried"] == [1, 2]
    [step] = [s for s in inspect_workflow(te.engine, "r").history.steps if s.step == "2"]
    assert (step.status, step.attempts, step.retried_at) == ("retrying", 5, T0 + 2)


def test_a_step_run_again_is_timed_from_the_retry(storage_factory: Opener) -> None:
    te, broken = _engine(storage_factory)
    te.start("pay", id="r")
    te.advance(1)
    te.advance(99)
    broken.clear()
    te.retry("r")  # at T0 + 100: charge succeeds at once
    view = read_run(te.engine, "r")
    [charge] = [row for row in view.rows if row.step.step == "2"]
    assert charge.step.retried_at == T0 + 100
    assert charge.duration == 0.0  # not the 100 s the run sat failed
    assert charge.attempts[0]["started_at"] == T0  # each failed attempt: when it ran
    assert [a["attempt"] for a in charge.attempts] == [1, 2]


def test_a_retry_after_the_code_failed_past_its_last_step(storage_factory: Opener) -> None:
    fixed: list[bool] = []

    def flow(ctx: Any, _: Any) -> Any:
        yield ctx.run("prepare")
        if not fixed:
            raise RuntimeError("a bug after step 1")
        return "done"

    te = make_engine(
        storage_factory, {"b": workflow("b").activities(prepare=lambda: None).execute(flow)}
    )
    te.start("b", id="b")
    failed = te.engine.events("b")[-1]
    assert failed["type"] == "run.failed"
    fixed.append(True)
    te.retry("b")
    assert te.get_handle("b").result() == "done"
    events = te.engine.events("b")
    assert failed in events  # the failure stays
    [retried] = [e for e in events if e["type"] == "run.retried"]
    assert retried["step"] == "2" and retried["error"]["message"].endswith("a bug after step 1")
    stored = [s for s, _ in te.storage.scan(keys.workflow_partition("b"), keys.RETRY_PREFIX)]
    assert stored == [keys.retry_key("b", keys.step_slot(1), 1).sort]


def test_a_traceback_keeps_the_innermost_frames_within_its_bound(storage_factory: Opener) -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise Declined("at the bottom")
        deeper(n - 1)

    def deeper(n: int) -> None:  # frames that differ, so Python does not fold them
        deep(n)

    def flow(ctx: Any, _: Any) -> Any:
        yield ctx.run("deep", 100, retry=RetryPolicy(max_attempts=1))

    te = make_engine(storage_factory, {"d": workflow("d").activities(deep=deep).execute(flow)})
    te.start("d", id="d")
    [row] = te.describe("d", attempts=True).failed_attempts or ()
    text = row["traceback"]
    assert len(text.encode()) <= MAX_TRACEBACK_BYTES
    assert text.startswith("[") and "earlier line(s) of the traceback cut" in text.splitlines()[0]
    assert text.endswith(
        'raise Declined("at the bottom")\ntest_retry_history.Declined: at the bottom\n'
    )
    huge = "Traceback (most recent call last):\n  File x\nValueError: " + "y" * 10_000 + "\n"
    cut = bounded(huge)
    assert len(cut.encode()) <= MAX_TRACEBACK_BYTES and "ValueError: yyy" in cut
