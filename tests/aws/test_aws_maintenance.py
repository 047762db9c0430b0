"""The maintenance handler: one pass per scheduled event, or a tick loop inside one
invocation that fires timers within a tick of their due time. Nothing sleeps for real: the
loop's sleep advances both the fake monotonic clock (Lambda's remaining time) and the
engine's virtual clock.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_support import Api, FakeMonotonic, emf_documents, log_lines, scheduled_event

from weft_serverless import Engine
from weft_serverless.aws import LocalContext, make_maintenance_handler
from weft_serverless.errors import ConfigurationError
from weft_serverless.storage import keys
from weft_serverless.testing import VirtualClock


@pytest.fixture
def ticking(monotonic: FakeMonotonic, clock: VirtualClock) -> FakeMonotonic:
    """Sleeping moves the engine clock too, as real time would."""
    monotonic.on_sleep = clock.advance
    return monotonic


def test_one_pass_per_event_by_default(
    api: Api, engine: Engine, monotonic: FakeMonotonic, clock: VirtualClock
) -> None:
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n", "input": 30})
    handler = make_maintenance_handler(sleep=monotonic.sleep, monotonic=monotonic)

    quiet = handler(scheduled_event(), LocalContext(55, monotonic))
    assert quiet["passes"] == 1 and quiet["timers_fired"] == 0
    assert quiet["next_due"] == pytest.approx(clock() + 30)
    clock.advance(31)
    fired = handler(scheduled_event(), LocalContext(55, monotonic))
    assert fired == {
        "passes": 1,
        "timers_fired": 1,
        "workflows_driven": 1,
        "max_lateness": pytest.approx(1.0),
        "cut_short": False,
        "next_due": None,
        "worker": 0,
        "workers": 1,
    }
    assert monotonic.sleeps == []
    assert engine.describe("n").status == "completed"


def test_the_tick_loop_fires_timers_within_a_tick_until_the_budget_runs_low(
    api: Api, engine: Engine, ticking: FakeMonotonic, clock: VirtualClock
) -> None:
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n3", "input": 3})
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n6", "input": 6.5})
    handler = make_maintenance_handler(
        tick_seconds=1, margin_seconds=2, sleep=ticking.sleep, monotonic=ticking
    )

    summary = handler(scheduled_event(), LocalContext(10, ticking))

    # Passes at 0..7 s: after the 8th, 2 s are left, under the margin plus one pass.
    assert summary["passes"] == 8
    assert ticking.sleeps == [1.0] * 7
    assert summary["timers_fired"] == 2
    assert summary["max_lateness"] == pytest.approx(0.5)  # 6.5 s timer, fired at 7 s
    assert engine.describe("n3").status == "completed"
    assert engine.describe("n6").status == "completed"


def test_the_tick_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, engine: Engine, ticking: FakeMonotonic
) -> None:
    monkeypatch.setenv("WEFT_MAINTENANCE_TICK_SECONDS", "5")
    monkeypatch.setenv("WEFT_MAINTENANCE_MARGIN_SECONDS", "10")
    handler = make_maintenance_handler(sleep=ticking.sleep, monotonic=ticking)
    summary = handler(scheduled_event(), LocalContext(30, ticking))
    assert ticking.sleeps == [5.0, 5.0, 5.0]  # passes at 0, 5, 10, 15; 15 s left after
    assert summary["passes"] == 4


def test_a_bad_tick_setting_fails_at_build_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEFT_MAINTENANCE_TICK_SECONDS", "often")
    with pytest.raises(ConfigurationError, match="WEFT_MAINTENANCE_TICK_SECONDS"):
        make_maintenance_handler()


def test_the_report_is_logged_and_emitted(
    api: Api,
    maintenance: Any,
    clock: VirtualClock,
    monotonic: FakeMonotonic,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n", "input": 10})
    clock.advance(12)
    capsys.readouterr()

    maintenance(scheduled_event("evt-42"), LocalContext(55, monotonic))

    out = capsys.readouterr().out
    lines = log_lines(out)
    [pass_line] = [line for line in lines if line["message"] == "maintenance pass"]
    assert pass_line["report"]["timers_fired"] == 1
    assert pass_line["report"]["max_lateness"] == pytest.approx(2.0)
    assert pass_line["correlation_id"] == "evt-42"
    [done] = [line for line in lines if line["message"] == "maintenance done"]
    assert done["maintenance"]["passes"] == 1
    [emf] = emf_documents(out)
    assert emf["Handler"] == "maintenance"
    assert emf["TimersFired"] == [1.0]
    assert emf["TimerLatenessMax"] == [2.0]
    assert emf["MaintenancePasses"] == [1.0]
    assert emf["WorkflowsCompleted"] == [1.0]
    units = {m["Name"]: m["Unit"] for m in emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units["TimerLatenessMax"] == "Seconds"


def test_workers_told_their_share_fire_only_its_timers(
    api: Api, engine: Engine, monotonic: FakeMonotonic, clock: VirtualClock
) -> None:
    ids = [f"w{n}" for n in range(8)]
    for workflow_id in ids:
        api("POST", "/workflows", {"workflow_type": "napper", "id": workflow_id, "input": 5})
    clock.advance(6)
    odd = [wf for wf in ids if keys.shard_of(wf, engine.runtime.shards.timers) % 2 == 1]
    handler = make_maintenance_handler(sleep=monotonic.sleep, monotonic=monotonic)

    first = handler({"worker": 1, "workers": 2}, LocalContext(55, monotonic))

    assert (first["worker"], first["workers"], first["timers_fired"]) == (1, 2, len(odd))
    assert {wf for wf in ids if engine.describe(wf).status == "completed"} == set(odd)
    second = handler({"worker": 0, "workers": 2}, LocalContext(55, monotonic))
    assert second["timers_fired"] == len(ids) - len(odd)
    assert all(engine.describe(wf).status == "completed" for wf in ids)


@pytest.mark.parametrize(
    "event",
    [
        {"worker": 2, "workers": 2},
        {"worker": -1, "workers": 2},
        {"worker": 0, "workers": 0},
        {"worker": "0", "workers": 2},
        {"worker": 0, "workers": 257},
        {"worker": True, "workers": 2},
    ],
)
def test_a_malformed_share_is_refused_before_any_read(
    event: dict[str, Any], engine: Engine, monotonic: FakeMonotonic
) -> None:
    handler = make_maintenance_handler(sleep=monotonic.sleep, monotonic=monotonic)
    with pytest.raises(ConfigurationError, match="share"):
        handler(event, LocalContext(55, monotonic))


def test_a_bad_parallel_fires_setting_fails_at_build_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEFT_MAINTENANCE_PARALLEL_FIRES", "0")
    with pytest.raises(ConfigurationError, match="WEFT_MAINTENANCE_PARALLEL_FIRES"):
        make_maintenance_handler()


def test_a_pass_that_fired_its_cap_is_followed_at_once_by_another(
    api: Api, engine: Engine, monotonic: FakeMonotonic, clock: VirtualClock
) -> None:
    """A backlog is fired for as long as the invocation lasts, not one cap per tick."""
    for n in range(5):
        api("POST", "/workflows", {"workflow_type": "napper", "id": f"b{n}", "input": 5})
    clock.advance(6)
    handler = make_maintenance_handler(sleep=monotonic.sleep, monotonic=monotonic)
    capped = engine.run_maintenance

    def two_a_pass(**options: Any) -> Any:
        return capped(max_timers=2, **options)

    engine.run_maintenance = two_a_pass  # type: ignore[method-assign]
    summary = handler(scheduled_event(), LocalContext(55, monotonic))

    assert summary["timers_fired"] == 5
    assert summary["passes"] == 3  # 2 + 2 + 1: the last read less than its cap, so it ends
    assert monotonic.sleeps == []
