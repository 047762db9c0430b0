"""``continue_as_new`` under ``workflow-lease`` and ``lease``: the continue batch is fenced.

Under workflow-lease the batch carries the claim's epoch condition like every owner write, so
an owner deposed between its last step and the continue (a cancel from another engine
rotated the epoch) writes nothing: the run stays cancelled, still run 1. A chain of runs
survives a crash takeover between runs, the new owner driving the continued run. Under the
store-wide ``lease`` a chain completes with every write carrying the lease condition.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from ownership_support import (
    TAKEOVER,
    Calls,
    Journal,
    Opener,
    caught,
    fencing_violations,
    make_engine,
    make_engines,
    of_category,
    rewritten_op_records,
    step_fence,
)

from weft_serverless import Engine, WorkflowCancelledError, workflow
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.testing import SimulatedCrash, VirtualClock

Gen = Generator[Any, Any, Any]


def _state_puts(journal: Journal, engine: str, workflow_id: str) -> list[Any]:
    key = keys.state_key(workflow_id)
    return [w for w in journal.writes if w.engine == engine and w.puts(key)]


def test_the_continue_batch_of_a_deposed_owner_is_refused(storage_factory: Opener) -> None:
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    engines: dict[str, Engine] = {}
    cancelled = []

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.run("b", x)
        if x == 1:
            if not cancelled:
                cancelled.append(True)
                engines["e2"].cancel("w")  # another engine, between the step and the continue
            yield ctx.continue_as_new(2)
        return x

    flows = {"flow": workflow("flow").activities(b=calls.recorder("b")).execute(flow)}
    engines.update(make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal))
    with caught() as seen:
        handle = engines["e1"].start("flow", 1, id="w")
    assert of_category(seen, WorkflowClaimLost)
    description = engines["e1"].describe("w")
    assert (description.status, description.run) == ("cancelled", 1)
    refused = [w for w in _state_puts(journal, "e1", "w") if not w.committed]
    assert len(refused) == 1
    assert step_fence(refused[0], "w") is not None  # the epoch, or the head that carries it
    with pytest.raises(WorkflowCancelledError):
        handle.result()
    assert fencing_violations(journal) == []


def test_a_chain_survives_a_takeover_between_runs(storage_factory: Opener) -> None:
    clock, journal, calls = VirtualClock(), Journal(), Calls()
    crashed: list[bool] = []

    def fragile(x: int) -> int:
        calls.add("fragile", x)
        if x == 2 and not crashed:
            crashed.append(True)
            raise SimulatedCrash("owner died in run 2")
        return x

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.run("fragile", x)
        if x < 3:
            yield ctx.continue_as_new(x + 1)
        return x

    flows = {"flow": workflow("flow").activities(fragile=fragile).execute(flow)}
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal)
    e2 = make_engine(storage_factory, flows, "e2", clock, journal=journal)
    with pytest.raises(SimulatedCrash):
        e1.start("flow", 1, id="w")
    assert e2.describe("w").run == 2
    clock.advance(TAKEOVER)
    e2.run_maintenance()  # takes the expired claim over, drives run 2 then run 3
    description = e2.describe("w")
    assert (description.status, description.run, description.result) == ("completed", 3, 3)
    continues = [w for w in journal.writes if w.committed and w.puts(keys.state_key("w"))]
    assert all(step_fence(w, "w") is not None for w in continues[1:])
    assert fencing_violations(journal) == []
    assert rewritten_op_records(journal) == {}


def test_a_chain_completes_under_the_store_lease(storage_factory: Opener) -> None:
    clock, journal = VirtualClock(), Journal()

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.sleep(1)
        if x < 3:
            yield ctx.continue_as_new(x + 1)
        return x

    flows = {"flow": workflow("flow").execute(flow)}
    e1 = make_engine(storage_factory, flows, "e1", clock, journal=journal, ownership="lease")
    e1.start("flow", 1, id="w")
    for _ in range(3):
        clock.advance(1)
        e1.run_maintenance()
    description = e1.describe("w")
    assert (description.status, description.run, description.result) == ("completed", 3, 3)
    lease = keys.meta_key(keys.LEASE_EPOCH)
    continues = [w for w in journal.writes if w.committed and w.puts(keys.state_key("w"))]
    assert len(continues) >= 3
    assert all(w.condition_on(lease) is not None for w in continues[1:])
