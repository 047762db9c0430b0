"""A crash at any write of a run whose steps leave timers behind: recovery still finds and
deletes them.

A step looks up what it left (a parked sleep's timer, a retry record) through the history's
slot-scope index, which a fresh engine rebuilds from the partition it reads. Each step here
races a one-hour sleep against an activity whose first attempt fails: the sleep parks (a
pending record and its timer), the retry parks (a retry record), the activity wins and the
step's commit must delete the sleep's timer. For every write of the crash-free run, the run
crashes before and after it, recovers on a fresh storage handle and finishes; no sleep timer
may outlive it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from engine_helpers import T0, Opener, WriteLog, advance_to, op_records, stored_timers

from weft_serverless import RetryPolicy, workflow
from weft_serverless.testing import CrashingStorage, SimulatedCrash, TestEngine

_NOW = RetryPolicy(max_attempts=3, initial_backoff=0.0)
STEPS = 2


def _flaky_once() -> Any:
    failed: set[int] = set()

    def flaky(index: int) -> int:
        if index not in failed:
            failed.add(index)
            raise RuntimeError("first attempt fails")
        return index * 10

    return flaky


def _racing(ctx: Any, n: int) -> Generator[Any, Any, list[Any]]:
    out: list[Any] = []
    for i in range(n):
        out.append((yield ctx.race(ctx.sleep(3600), ctx.run("flaky", i, retry=_NOW))))
    return out


def _run(storage_factory: Opener, store: CrashingStorage, wf_id: str) -> dict[str, Any]:
    definition = workflow("racing").activities(flaky=_flaky_once()).execute(_racing)
    te = TestEngine({"racing": definition}, storage=store)
    actions = [
        lambda: te.start("racing", STEPS, id=wf_id, idempotency_key=wf_id),
        lambda: advance_to(te, T0 + 120),  # past any wake-up a crash left: driven to its end
        te.run_maintenance,
    ]
    crashed = False
    for index, action in enumerate(actions):
        try:
            action()
        except SimulatedCrash:
            crashed = True
            te.crash()
            te.recover(storage=CrashingStorage(storage_factory()))
            for again in actions[index:]:  # the client retries the call that crashed
                again()
            break
    return {
        "crashed": crashed,
        "status": te.describe(wf_id).status,
        "result": te.get_handle(wf_id).result(),
        "ops": [
            {k: v for k, v in op.items() if k != "at"}
            for op in op_records(te.storage, wf_id, branches=True)
        ],
        "timers": [due for due, owner in stored_timers(te.storage) if owner == wf_id],
    }


def test_a_crash_at_any_write_leaves_no_stale_timer_behind(storage_factory: Opener) -> None:
    reference_store = WriteLog(storage_factory())
    reference = _run(storage_factory, reference_store, "ref")
    assert reference["status"] == "completed"
    assert reference["result"] == [(1, 0), (1, 10)]  # (winning branch, its value)
    assert reference["timers"] == []
    failures: list[str] = []
    for write in range(1, reference_store.writes + 1):
        for when in ("before", "after"):
            option = "crash_before_write" if when == "before" else "crash_after_write"
            wf_id = f"{when}-{write}"
            got = _run(
                storage_factory, CrashingStorage(storage_factory(), **{option: write}), wf_id
            )
            problems = []
            if not got["crashed"]:
                problems.append("the crash never happened")
            if got["status"] != "completed" or got["result"] != reference["result"]:
                problems.append(f"ended {got['status']} with {got['result']!r}")
            if got["ops"] != reference["ops"]:
                problems.append(f"op log {got['ops']} differs from {reference['ops']}")
            if got["timers"]:
                problems.append(f"timers left, due at {[d - T0 for d in got['timers']]}")
            if problems:
                failures.append(f"{when} write {write}: " + "; ".join(problems))
    assert not failures, "\n".join(failures)
