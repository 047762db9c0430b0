"""A schedule change that lands while a fire is being written is never overwritten.

A fire reads the schedule's record, plans the fire, then writes the new record and the run
in one batch conditioned on the record it read. A pause made by another engine between the
read and the write must win: the fire's batch is refused, the fire re-reads, finds the
schedule paused and starts nothing (docs/api.md, Schedules). Without the condition, the
fire's record (unpaused, next fire armed) would overwrite the pause and its run would start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from feature_support import Opener

from weft_serverless import Engine, workflow
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Storage
from weft_serverless.testing import DelegatingStorage, VirtualClock

T0 = 1767225600.0  # 2026-01-01T00:00:00Z


def _report(ctx: Any, input: Any) -> Any:
    return input
    yield  # a generator that ends at once


WORKFLOWS = {"report": workflow("report").execute(_report)}


class _BeforeTheFire(DelegatingStorage):
    """Calls ``hook`` once, right before the batch that writes a fire (the schedule's
    record and a run's state together) is sent."""

    def __init__(self, inner: Storage, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.hook, self.called = hook, False

    def _conditional_batch(self, conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        fire = any(op.key.partition == keys.SCHEDULE_PARTITION for op in ops) and any(
            op.key.sort == keys.STATE for op in ops
        )
        if fire and not self.called:
            self.called = True
            self.hook()
        return self.inner.conditional_batch(conditions, ops)


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_a_pause_landing_while_a_fire_is_written_holds(
    storage_factory: Opener, ownership: str
) -> None:
    clock = VirtualClock(T0)
    other = Engine.create(
        storage_factory(),
        WORKFLOWS,
        background_tasks="manual",
        clock=clock,
        ownership=ownership,
        engine_id="other",
    )
    racing = _BeforeTheFire(storage_factory(), lambda: other.get_schedule("nightly").pause())
    engine = Engine.create(
        racing, WORKFLOWS, background_tasks="manual", clock=clock, ownership=ownership
    )
    schedule = engine.schedule("nightly", "report", every="1m")
    clock.advance(60.0)
    engine.run_maintenance(clock())
    assert racing.called
    described = schedule.describe()
    assert (described.paused, described.next_fire_at, described.fired) == (True, None, 0)
    assert engine.list() == []  # the fire's run did not start
    timers = [
        sort
        for shard in range(keys.TIMER_SHARDS)
        for sort, _ in engine.runtime.storage.scan(keys.timer_partition(shard))
    ]
    assert not [sort for sort in timers if sort.endswith("#schedule")]
