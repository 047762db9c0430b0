"""The serverless invocation scope under ``workflow-lease``: ``engine.invocation(...)``.

A Lambda container is frozen between invocations, so at the end of every invocation the engine
releases the claims of the workflows that are parked (they run no code): another engine can then
wake them at once, with no expiry to wait for. Inside the scope no step starts with less than
``step_reserve`` seconds left (the workflow parks behind a timer due now), and a heartbeat renews
the held claims while a long activity runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any

import pytest
from ownership_support import (
    T0,
    Calls,
    Journal,
    Opener,
    caught,
    claim_indexed,
    counter,
    epoch_of,
    fencing_violations,
    holder_of,
    make_engine,
    make_engines,
    of_category,
    step_wait_step,
    timers_of,
)

from weft_serverless import workflow
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.testing import VirtualClock

Gen = Generator[Any, Any, Any]


def two_steps(calls: Calls) -> dict[str, Any]:
    """a -> wait "go" -> b."""
    return step_wait_step(calls)


def wait_until(predicate: Any, timeout: float = 20.0) -> None:
    """Poll a condition set by another thread (never used to wait for a workflow timer)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def test_parked_claims_are_released_at_exit_so_another_engine_drives_at_once(
    storage_factory: Opener,
) -> None:
    """At invocation exit the parked workflow's holder is deleted (epoch kept, claims index
    cleared, metric ``claims_released_at_invocation_end``); a signal through another engine
    then acquires (epoch 2) and drives it inline at once: no maintenance, no clock advance."""
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    e1, e2 = make_engines(
        storage_factory, two_steps(calls), ["e1", "e2"], clock, journal=journal
    ).values()
    store = storage_factory()
    with e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        e1.start("flow", 1, id="w")
        assert holder_of(store, "w")["engine_id"] == "e1"  # type: ignore[index]
    assert holder_of(store, "w") is None and epoch_of(store, "w") == 1
    assert not claim_indexed(store, "w")
    assert "w" not in e1.runtime.fence.claims  # type: ignore[attr-defined]
    assert counter(e1, "claims_released_at_invocation_end") == 1

    e2.signal("w", "go", 5)
    assert e2.get_handle("w").result() == 7
    assert epoch_of(store, "w") == 2
    assert calls.count("a") == 1 and calls.count("b") == 1
    assert fencing_violations(journal) == []


def test_exit_keeps_the_claim_of_a_workflow_still_being_driven(storage_factory: Opener) -> None:
    """Only parked claims are released: a workflow another thread of the same engine is still
    driving keeps its holder when an invocation on that engine ends, and completes unharmed."""
    clock, calls = VirtualClock(), Calls()
    inside, release = threading.Event(), threading.Event()

    def slow(x: int) -> int:
        inside.set()
        release.wait(30)
        return x

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("slow", x)
        return y

    flows = {**two_steps(calls), "slow": workflow("slow").activities(slow=slow).execute(flow)}
    e1 = make_engine(storage_factory, flows, "e1", clock)
    store = storage_factory()
    e1.start("flow", 1, id="parked")
    driver = threading.Thread(target=lambda: e1.start("slow", 3, id="busy"))
    driver.start()
    wait_until(inside.is_set)
    with e1.invocation(time_left=lambda: 60.0, heartbeat=False):
        pass
    assert holder_of(store, "parked") is None
    assert holder_of(store, "busy")["engine_id"] == "e1"  # type: ignore[index]
    with caught() as seen:  # warnings.catch_warnings is process-wide: it sees the driver
        release.set()
        driver.join(30)
    assert not driver.is_alive()
    assert e1.get_handle("busy").result() == 3
    assert of_category(seen, WorkflowClaimLost) == []


@pytest.mark.parametrize("next_call", ["maintenance-elsewhere", "next-invocation"])
def test_a_budget_too_small_parks_the_workflow_behind_a_timer_due_now(
    storage_factory: Opener, next_call: str
) -> None:
    """With less than ``step_reserve`` seconds left no step starts: the workflow parks behind a
    timer due now (metric ``steps_deferred_for_budget``) and its claim is released at exit; the
    next maintenance pass (on any engine) or the next invocation finishes the step at once."""
    clock, calls = VirtualClock(), Calls()
    e1, e2 = make_engines(storage_factory, two_steps(calls), ["e1", "e2"], clock).values()
    store = storage_factory()
    with e1.invocation(time_left=lambda: 0.5, step_reserve=1.0, heartbeat=False):
        e1.start("flow", 1, id="w")
    assert calls.count("a") == 0
    assert e1.describe("w").status == "running"
    assert counter(e1, "steps_deferred_for_budget") == 1
    timers = timers_of(store, "w")
    assert [keys.timer_due_of(t.sort) for t in timers] == [T0]
    assert holder_of(store, "w") is None

    if next_call == "maintenance-elsewhere":
        report = e2.run_maintenance()  # same instant: the timer is due now
        assert report.timers_fired == 1
        owner = "e2"
    else:
        with e1.invocation(time_left=lambda: 60.0, step_reserve=1.0, heartbeat=False):
            e1.run_maintenance()
        owner = "e1"
    assert calls.count("a") == 1 and timers_of(store, "w") == []
    engine = e2 if owner == "e2" else e1
    engine.signal("w", "go", 5)
    assert engine.get_handle("w").result() == 7
    assert calls.count("a") == 1


def test_heartbeat_renews_held_claims_during_a_long_activity(storage_factory: Opener) -> None:
    """While an invocation drives a long activity the heartbeat renews the claims held: the
    holder's ``expires_at`` follows the clock, so another engine's maintenance at a time past the
    original expiry judgment does not take over, and the owner commits without deposition."""
    renew, ttl = 0.05, 1.0  # heartbeat period = renew interval, in real seconds
    clock, journal = VirtualClock(), Journal()
    engines: dict[str, Any] = {}
    observed: dict[str, Any] = {}

    def long_activity(x: int) -> int:
        store = storage_factory()
        e1 = engines["e1"]
        clock.advance(0.9)  # unrenewed, the claim would be taken over after T0 + 1.1
        beats = counter(e1, "heartbeat_renewals")
        wait_until(lambda: counter(e1, "heartbeat_renewals") >= beats + 2)
        observed["renewed"] = holder_of(store, "w")
        observed["later"] = clock.advance(0.6)  # T0 + 1.5: past the original takeover point
        beats = counter(e1, "heartbeat_renewals")
        wait_until(lambda: counter(e1, "heartbeat_renewals") >= beats + 2)
        observed["report"] = engines["e2"].run_maintenance()
        observed["holder"] = holder_of(store, "w")
        return x * 2

    def flow(ctx: Any, x: int) -> Gen:
        y = yield ctx.run("long", x)
        return y

    flows = {"flow": workflow("flow").activities(long=long_activity).execute(flow)}
    engines.update(
        make_engines(
            storage_factory,
            flows,
            ["e1", "e2"],
            clock,
            journal=journal,
            workflow_claim_ttl=ttl,
            workflow_claim_renew_interval=renew,
        )
    )
    e1 = engines["e1"]
    with caught() as seen, e1.invocation(time_left=lambda: 600.0, heartbeat=True):
        handle = e1.start("flow", 21, id="w")
    assert observed["renewed"] == {
        "engine_id": "e1",
        "epoch": 1,
        "expires_at": T0 + 0.9 + ttl,
        "claimed_at": T0,
    }
    assert observed["report"].parts["claims_reclaimed"] == 0
    assert observed["holder"]["engine_id"] == "e1" and observed["holder"]["epoch"] == 1
    assert observed["holder"]["expires_at"] == observed["later"] + ttl
    assert handle.result() == 42
    assert of_category(seen, WorkflowClaimLost) == []
    assert counter(e1, "claim_attempts.deposed") == 0
    assert counter(engines["e2"], "claim_attempts.takeover") == 0
    assert epoch_of(storage_factory(), "w") == 1
    assert fencing_violations(journal) == []
