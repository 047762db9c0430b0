"""What an idle maintenance pass costs: one read per timer shard, whatever is parked.

An EventBridge tick runs a pass every minute, most of them with nothing due, so the idle pass
is paid 1,440 times a day per deployment. Its cost must not grow with the number of parked
runs, and must stay within ``TIMER_SHARDS + 5`` requests in every ownership mode (ADR 0039).
Requests are counted by ``storage.stats`` (one per read or write call) and, on DynamoDB, also
by the adapter's meter, which counts every ``Query`` page actually sent.
"""

from __future__ import annotations

import pytest
from engine_helpers import Opener

from weft_serverless import Engine, workflow
from weft_serverless.engine.maintenance import PROBE_TIMERS
from weft_serverless.storage import keys
from weft_serverless.testing import VirtualClock

IDLE_BOUND = keys.TIMER_SHARDS + 5


def nap(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.sleep("1h")
    return "woke"


NAP = workflow("nap").execute(nap)


def _idle_pass_requests(
    storage_factory: Opener, parked: int, ownership: str, prefix: str = "nap"
) -> tuple[int, int | None, float | None]:
    """Park ``parked`` runs on a 1 h sleep inside one invocation (claims released at its end,
    as in Lambda), then count one pass a minute later: (stats requests, metered requests
    on DynamoDB, the pass's next_due)."""
    clock = VirtualClock()
    storage = storage_factory()
    engine = Engine.create(
        storage,
        {"nap": NAP},
        ownership=ownership,  # type: ignore[arg-type]
        background_tasks="manual",
        clock=clock,
        recover=False,
    )
    with engine.invocation():
        for index in range(parked):
            engine.start("nap", id=f"{prefix}-{index}")
    parked_at = clock()
    clock.advance(60.0)
    meter = getattr(storage, "meter", None)
    before = meter.snapshot().requests if meter is not None else None
    storage.stats.reset()
    report = engine.run_maintenance()
    requests = storage.stats.snapshot()["requests"]
    metered = (
        meter.snapshot().requests - before if meter is not None and before is not None else None
    )
    assert report.timers_fired == 0
    assert report.next_due == pytest.approx(parked_at + 3600, abs=1.0)
    engine.close()
    return requests, metered, report.next_due


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_idle_pass_with_ten_parked_runs_costs_at_most_shards_plus_five(
    storage_factory: Opener, ownership: str
) -> None:
    requests, metered, _ = _idle_pass_requests(storage_factory, 10, ownership)
    assert requests <= IDLE_BOUND, requests
    if metered is not None:
        assert metered == requests  # every scan fits one Query page: the counts agree


@pytest.mark.backends("memory", "sqlite")  # parking 1,000 runs on moto takes minutes
@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_idle_pass_with_a_thousand_parked_runs_costs_what_ten_cost(
    storage_factory: Opener, ownership: str
) -> None:
    small, _, _ = _idle_pass_requests(storage_factory, 10, ownership)
    large, _, _ = _idle_pass_requests(storage_factory, 1000, ownership, "big")
    assert large <= IDLE_BOUND, large
    assert large == small


def test_idle_pass_reads_one_timer_item_per_nonempty_shard(storage_factory: Opener) -> None:
    """The probe reads the earliest timer of each shard and nothing behind it, and the pass's
    ``next_due`` is the earliest of them without another read."""
    clock = VirtualClock()
    storage = storage_factory()
    engine = Engine.create(
        storage, {"nap": NAP}, background_tasks="manual", clock=clock, recover=False
    )
    for index in range(40):
        engine.start("nap", id=f"nap-{index}")
    shards = {keys.shard_of(f"nap-{index}", keys.TIMER_SHARDS) for index in range(40)}
    clock.advance(60.0)
    storage.stats.reset()
    report = engine.run_maintenance()
    stats = storage.stats.snapshot()
    assert (stats["scans"], stats["scanned_items"]) == (keys.TIMER_SHARDS, len(shards))
    assert report.next_due is not None
    engine.close()


@pytest.mark.backends("dynamodb")
def test_idle_pass_probes_cost_one_read_unit_a_shard(storage_factory: Opener) -> None:
    """With more than a probe's worth of timers in every shard, each probe is still one
    strongly consistent Query of one read unit (16 timer items stay under 4 KB)."""
    clock = VirtualClock()
    storage = storage_factory()
    engine = Engine.create(
        storage, {"nap": NAP}, background_tasks="manual", clock=clock, recover=False
    )
    for index in range(120):
        engine.start("nap", id=f"nap-{index}")
    counts = [0] * keys.TIMER_SHARDS
    for index in range(120):
        counts[keys.shard_of(f"nap-{index}", keys.TIMER_SHARDS)] += 1
    assert min(counts) > PROBE_TIMERS
    clock.advance(60.0)
    meter = storage.meter  # type: ignore[attr-defined]
    before = meter.snapshot()
    engine.run_maintenance()
    used = meter.snapshot() - before
    # the engine's copy of the shard counts is 60 s old: one GetItem reads it again first
    # (ADR 0050), then one Query a shard
    assert (used.requests, used.read_units) == (keys.TIMER_SHARDS + 1, keys.TIMER_SHARDS + 1)
    clock.advance(1.0)
    before = meter.snapshot()
    engine.run_maintenance()
    used = meter.snapshot() - before
    assert (used.requests, used.read_units) == (keys.TIMER_SHARDS, keys.TIMER_SHARDS)
    engine.close()


def twice(ctx, _):  # type: ignore[no-untyped-def]
    yield ctx.sleep("1m")
    yield ctx.sleep("10m")
    return "woke twice"


TWICE = workflow("twice").execute(twice)


def test_a_pass_that_fires_reads_each_timer_shard_once(storage_factory: Opener) -> None:
    """A pass that fires a sleep knows its ``next_due`` without reading the shards again:
    the timer the fired run's drive armed (its next sleep) is noted as it is committed, and
    the probes saw the other shards' earliest timers (ADR 0058)."""
    clock = VirtualClock()
    storage = storage_factory()
    engine = Engine.create(
        storage,
        {"twice": TWICE, "nap": NAP},
        background_tasks="manual",
        clock=clock,
        recover=False,
    )
    engine.start("twice", id="twice-0")
    engine.start("nap", id="nap-0")
    started = clock()
    clock.advance(61.0)
    timer_reads = _count_timer_reads(storage)
    report = engine.run_maintenance()
    assert report.timers_fired == 1
    assert len(timer_reads) == keys.TIMER_SHARDS  # the probes, and no read after firing
    assert len(set(timer_reads)) == keys.TIMER_SHARDS
    # the fired run armed its 10 minute sleep: earlier than the nap's hour
    assert report.next_due == pytest.approx(clock() + 600, abs=1.0)
    assert report.next_due < started + 3600
    engine.close()


def _count_timer_reads(storage: object) -> list[str]:
    """The timer partitions ``storage`` is asked to scan from now on, one entry a scan."""
    reads: list[str] = []
    scan = storage.scan  # type: ignore[attr-defined]

    def counted(partition: str, *args: object, **kwargs: object) -> object:
        if keys.is_timer_partition(partition):
            reads.append(partition)
        return scan(partition, *args, **kwargs)

    storage.scan = counted  # type: ignore[attr-defined]
    return reads


def test_a_pass_that_read_a_shard_past_its_probe_reads_that_shard_again(
    storage_factory: Opener,
) -> None:
    """A shard with more due timers than a probe holds was read up to the due bound only:
    what lies behind is not known, so that shard alone is read again for ``next_due``."""
    clock = VirtualClock()
    storage = storage_factory()
    engine = Engine.create(
        storage, {"nap": NAP}, background_tasks="manual", clock=clock, recover=False
    )
    ids = [f"nap-{index}" for index in range(200)]
    for workflow_id in ids:
        engine.start("nap", id=workflow_id)
    clock.advance(3600.0 - 30.0)
    late = "late-nap"
    engine.start("nap", id=late)  # due half a minute after the others
    engine.run_maintenance()  # fires nothing: the shard marker's copy is read again here
    clock.advance(31.0)
    counts = [0] * keys.TIMER_SHARDS
    for workflow_id in ids:
        counts[keys.shard_of(workflow_id, keys.TIMER_SHARDS)] += 1
    assert max(counts) > PROBE_TIMERS
    timer_reads = _count_timer_reads(storage)
    report = engine.run_maintenance()
    assert report.timers_fired == len(ids) and not report.cut_short
    full = {keys.timer_partition(n) for n, count in enumerate(counts) if count >= PROBE_TIMERS}
    for number in range(keys.TIMER_SHARDS):
        partition = keys.timer_partition(number)
        # a full shard: its probe, its read on to the due bound, its read for next_due
        assert timer_reads.count(partition) == (3 if partition in full else 1), partition
    assert report.next_due == pytest.approx(clock() - 31.0 + 3600.0, abs=1.0)  # the late nap
    engine.close()
