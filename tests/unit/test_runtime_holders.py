"""Runtime is fixed once built; what changes while an engine runs has one explicit holder."""

from __future__ import annotations

import dataclasses

import pytest

from weft_serverless import Engine, MemoryStorage


def test_runtime_fields_cannot_be_reassigned_after_create() -> None:
    engine = Engine.create(MemoryStorage(), {}, background_tasks="manual")
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.runtime.fence = engine.runtime.fence  # type: ignore[misc]
    engine.close()


def test_invocation_budget_is_set_by_the_scope_and_restored_after_it() -> None:
    with Engine.create(MemoryStorage(), {}, background_tasks="manual") as engine:
        rt = engine.runtime
        with engine.invocation(time_left=lambda: 0.5, step_reserve=1.0, heartbeat=False):
            assert rt.time_left is not None and rt.low_on_time(None)
        assert rt.time_left is None and not rt.low_on_time(10.0)


def test_maintenance_moves_engine_time_on_and_never_back() -> None:
    with Engine.create(MemoryStorage(), {}, background_tasks="manual", clock=lambda: 5.0) as e:
        e.run_maintenance(now=100.0)
        e.run_maintenance(now=50.0)
        assert e.runtime.now() == 100.0


def test_closed_runs_are_drained_once_each() -> None:
    with Engine.create(MemoryStorage(), {}, background_tasks="manual") as engine:
        runs = engine.runtime.closed_runs
        runs.notify("a")
        runs.notify("b")
        assert list(runs.drain()) == ["b", "a"]
        assert list(runs.drain()) == []


def test_close_is_seen_through_the_shutdown_holder() -> None:
    engine = Engine.create(MemoryStorage(), {}, background_tasks="manual")
    assert not engine.runtime.closed
    engine.close()
    assert engine.runtime.closed and engine.runtime.shutdown.closed
