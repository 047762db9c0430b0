"""Work that one invocation cannot finish is finished by a later one.

* A handler crashes mid-workflow: its claim stays in the table until it expires, then the
  maintenance handler of a fresh container takes the workflow over and finishes it, without
  running a committed step again.
* A budget too small for the next activity: the workflow parks behind a timer due now and
  the next maintenance invocation completes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_flows
import pytest
from aws_support import Api, FakeMonotonic, emf_documents, scheduled_event

from weft_serverless.aws import (
    LocalContext,
    get_engine,
    make_api_handler,
    make_maintenance_handler,
    reset_engine,
)
from weft_serverless.engine.persistence.wakeups import WAKE_GRACE
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.testing import CrashingStorage, SimulatedCrash, VirtualClock


class DiesAtCrash(CrashingStorage):
    """Once crashed, refuses every later write, as a dead process writes nothing.

    ``SimulatedCrash`` unwinds through ``finally`` blocks that a real crash never runs
    (such as the release of parked claims at the end of the invocation); this keeps them
    from reaching the table.
    """

    def _write(self, apply: Callable[[], bool]) -> bool:
        if self.crashed:
            raise SimulatedCrash("the process is dead")
        return super()._write(apply)


CLAIM_TTL, RENEW = 30.0, 5.0  # the engine's defaults
EXPIRED = CLAIM_TTL + 2 * RENEW + 1  # a takeover needs expires_at + 2 x renew < now


def test_a_crashed_invocation_is_finished_by_the_maintenance_handler(
    client: Any, dynamodb_table: str, clock: VirtualClock, monotonic: FakeMonotonic
) -> None:
    crashing = DiesAtCrash(DynamoDBStorage(dynamodb_table, client=client))
    get_engine(storage=crashing, workflows=aws_flows.workflows, clock=clock)
    api = Api(make_api_handler(sleep=monotonic.sleep, monotonic=monotonic), monotonic)
    crashing.crash_after_write = crashing.writes + 2  # the start, then the first step

    with pytest.raises(SimulatedCrash):
        api("POST", "/workflows", {"workflow_type": "two_steps", "id": "crashy"})
    assert dict(aws_flows.CALLS) == {"quick": 1}

    reset_engine()  # the container is gone; a new one serves the next invocations
    storage = DynamoDBStorage(dynamodb_table, client=client)
    fresh = get_engine(storage=storage, workflows=aws_flows.workflows, clock=clock)
    stranded = fresh.describe("crashy")
    assert stranded.status == "running"
    assert stranded.owner is not None  # the dead invocation's claim was never released
    maintenance = make_maintenance_handler(tick_seconds=0, monotonic=monotonic)

    early = maintenance(scheduled_event("evt-early"), LocalContext(55, monotonic))
    assert early["workflows_driven"] == 0
    assert fresh.describe("crashy").status == "running"  # not expired yet: not taken

    clock.advance(max(EXPIRED, WAKE_GRACE + 1))  # the start's wake-up brings the takeover
    report = maintenance(scheduled_event("evt-late"), LocalContext(55, monotonic))

    assert fresh.describe("crashy").status == "completed"
    assert fresh.describe("crashy").result == [1, 20]
    assert fresh.describe("crashy").owner is None
    assert dict(aws_flows.CALLS) == {"quick": 1, "slow": 1}  # the committed step did not rerun
    assert report["passes"] == 1
    assert fresh.runtime.metrics.counters["claim_attempts.takeover"] == 1


def test_a_budget_too_small_for_the_next_activity_parks_and_a_later_invocation_finishes(
    api: Api, maintenance: Any, clock: VirtualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    # 5 s left: "quick" (no timeout) fits the 2 s reserve, "slow" (timeout 10 s) does not.
    reply = api("POST", "/workflows", {"workflow_type": "two_steps", "id": "tight"}, timeout=5)

    assert reply.status == 201
    assert reply.body["status"] == "running"
    assert dict(aws_flows.CALLS) == {"quick": 1}
    [emf] = emf_documents(capsys.readouterr().out)
    assert emf["StepsDeferredForBudget"] == [1.0]
    assert emf["ClaimsReleasedAtInvocationEnd"] == [1.0]
    assert api("GET", "/workflows/tight").body["owner"] is None  # any container may go on

    clock.advance(1)
    summary = maintenance(scheduled_event(), api.context(timeout=55))

    assert summary["timers_fired"] == 1
    assert summary["workflows_driven"] == 1
    assert dict(aws_flows.CALLS) == {"quick": 1, "slow": 1}
    result = api("GET", "/workflows/tight/result")
    assert result.status == 200
    assert result.body["result"] == [1, 20]


def test_a_later_invocation_that_is_also_short_parks_again(
    api: Api, maintenance: Any, clock: VirtualClock
) -> None:
    api("POST", "/workflows", {"workflow_type": "two_steps", "id": "tight"}, timeout=5)
    clock.advance(1)
    summary = maintenance(scheduled_event(), api.context(timeout=8))  # still under 10 s
    assert summary["timers_fired"] == 1
    assert dict(aws_flows.CALLS) == {"quick": 1}
    assert api("GET", "/workflows/tight").body["status"] == "running"
    clock.advance(1)
    maintenance(scheduled_event(), api.context(timeout=55))
    assert api("GET", "/workflows/tight").body["status"] == "completed"


def _other_container(client: Any, dynamodb_table: str, clock: VirtualClock) -> Any:
    from weft_serverless.aws import build_engine

    return build_engine(
        storage=DynamoDBStorage(dynamodb_table, client=client),
        workflows=aws_flows.workflows,
        clock=clock,
        engine_id="maintenance-container",
    )


def test_a_waiting_start_lets_another_container_fire_its_timer(
    api: Api, client: Any, dynamodb_table: str, clock: VirtualClock, monotonic: FakeMonotonic
) -> None:
    """The API container parks the run and waits; the maintenance container fires the timer
    during the wait and finishes the run, which the wait then reports."""
    maintenance = _other_container(client, dynamodb_table, clock)
    fired: list[int] = []

    def meanwhile(seconds: float) -> None:
        if len(monotonic.sleeps) == 2:
            clock.advance(5)
            fired.append(maintenance.run_maintenance().timers_fired)

    monotonic.on_sleep = meanwhile
    body = {"workflow_type": "napper", "input": 5, "id": "w", "wait_seconds": 10}
    reply = api("POST", "/workflows", body)
    assert fired == [1]
    assert (reply.status, reply.body["status"], reply.body["result"]) == (
        201,
        "completed",
        "rested",
    )
    maintenance.close()


def test_a_container_that_dies_while_waiting_leaves_nothing_held(
    client: Any, dynamodb_table: str, clock: VirtualClock, monotonic: FakeMonotonic
) -> None:
    """The claim was released before the wait: a crash during it strands nothing, and the
    maintenance container finishes the run at once, with no claim expiry to sit out."""
    get_engine(
        storage=DynamoDBStorage(dynamodb_table, client=client),
        workflows=aws_flows.workflows,
        clock=clock,
    )
    api = Api(make_api_handler(sleep=monotonic.sleep, monotonic=monotonic), monotonic)

    def die(seconds: float) -> None:
        raise SimulatedCrash("the container froze for good during the wait")

    monotonic.on_sleep = die
    with pytest.raises(SimulatedCrash):
        api(
            "POST",
            "/workflows",
            {"workflow_type": "napper", "input": 5, "id": "w", "wait_seconds": 10},
        )
    reset_engine()

    maintenance = _other_container(client, dynamodb_table, clock)
    assert maintenance.describe("w").owner is None  # no claim left behind
    clock.advance(5)  # the nap is over; no claim TTL has passed
    assert maintenance.run_maintenance().timers_fired == 1
    assert maintenance.describe("w").status == "completed"
    maintenance.close()
