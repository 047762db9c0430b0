"""Records in a format this release does not know are refused and left exactly as stored.

A newer release may write records an older one would misread (a rollback, a mixed fleet). Each
test stores a run, stamps one of its records with a newer schema version, then drives every
path that reads it (describe, signal, cancel, query, a due timer, a takeover) and checks that
each refuses with ``UnsupportedSchemaVersionError`` or skips it, and that not one byte of the
store changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from engine_helpers import make_engine

from weft_serverless import Engine, UnsupportedSchemaVersionError, current_activity, workflow
from weft_serverless.codec import decode, decode_record, encode
from weft_serverless.engine.ownership import HEAD_LAYOUT
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key, Put, Storage
from weft_serverless.testing import TestEngine, VirtualClock

Opener = Callable[[], Storage]
NEWER = 2


def _sleeper(ctx: Any, _: Any) -> Iterator[Any]:
    yield ctx.run("step")
    yield ctx.sleep("60s")
    return "done"


def _step() -> str:
    return "ok"


SLEEPER = workflow("sleeper").activities(step=_step).execute(_sleeper)
WORKFLOWS = {"sleeper": SLEEPER}


def snapshot(storage: Storage, workflow_id: str) -> dict[Key, bytes]:
    """Everything the engine may touch for one run: its partition and every index."""
    partitions = [keys.workflow_partition(workflow_id), keys.META_PARTITION]
    partitions += [keys.timer_partition(s) for s in range(keys.TIMER_SHARDS)]
    partitions += [keys.claim_partition(s) for s in range(keys.CLAIM_SHARDS)]
    partitions += [
        keys.status_partition(status, s)
        for status in ("pending", "running", "suspended", "completed", "failed", "cancelled")
        for s in range(keys.STATUS_SHARDS)
    ]
    return {Key(p, sort): value for p in partitions for sort, value in storage.scan(p)}


def stamp(storage: Storage, key: Key, version: object = NEWER) -> None:
    """Rewrite one stored record as a newer release would: same fields, a newer ``sv``."""
    value = storage.get(key)
    assert value is not None
    storage.put(key, encode({**decode(value), "sv": version}))


def parked(te: TestEngine) -> str:
    te.start("sleeper", id="wf-1")
    assert te.describe("wf-1").status == "running"
    return "wf-1"


@pytest.mark.parametrize("version", [NEWER, 0, "1", None])
def test_a_state_in_an_unknown_format_is_refused_by_every_call(
    storage_factory: Opener, version: object
) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    workflow_id = parked(te)
    stamp(te.storage, keys.state_key(workflow_id), version)
    before = snapshot(te.storage, workflow_id)

    calls: list[Callable[[], object]] = [
        lambda: te.describe(workflow_id),
        lambda: te.signal(workflow_id, "go"),
        lambda: te.cancel(workflow_id),
        lambda: te.suspend(workflow_id),
        lambda: te.query(workflow_id, "anything"),
        lambda: te.engine.resume(workflow_id),
    ]
    for call in calls:
        with pytest.raises(UnsupportedSchemaVersionError, match="upgrade this engine"):
            call()
    assert snapshot(te.storage, workflow_id) == before


def test_maintenance_leaves_a_newer_run_and_its_due_timer_as_they_are(
    storage_factory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    workflow_id = parked(te)
    stamp(te.storage, keys.state_key(workflow_id))
    before = snapshot(te.storage, workflow_id)

    with caplog.at_level(logging.WARNING, "weft_serverless.engine"):
        report = te.advance(61)  # the sleep timer is due: the pass must not crash on it
    assert report.timers_fired == 0
    assert report.parts.get("timers_retained") == 1
    assert te.runtime.metrics.counters["records_skipped_unsupported"] == 1
    assert "cannot read" in caplog.text and "schema version 2" in caplog.text
    assert snapshot(te.storage, workflow_id) == before
    te.recover()  # recovery drives running runs: it skips this one too
    assert snapshot(te.storage, workflow_id) == before


def test_a_newer_step_record_is_refused_before_replay(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    workflow_id = parked(te)
    stamp(te.storage, keys.op_key(workflow_id, keys.step_slot(0)))
    before = snapshot(te.storage, workflow_id)

    with pytest.raises(UnsupportedSchemaVersionError, match=r"op#00000000"):
        te.engine.resume(workflow_id)
    te.advance(61)
    assert snapshot(te.storage, workflow_id) == before
    assert te.runtime.metrics.counters["records_skipped_unsupported"] == 1


def test_a_newer_timer_record_is_skipped_with_a_warning(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, WORKFLOWS)
    workflow_id = parked(te)
    [(timer_key, _)] = [
        (Key(keys.timer_partition(s), sort), value)
        for s in range(keys.TIMER_SHARDS)
        for sort, value in te.storage.scan(keys.timer_partition(s))
    ]
    stamp(te.storage, timer_key)
    before = snapshot(te.storage, workflow_id)

    report = te.advance(61)
    assert report.timers_fired == 0
    assert report.next_due == keys.timer_due_of(timer_key.sort)  # still stored, still earliest
    assert te.runtime.metrics.counters["records_skipped_unsupported"] == 1
    assert snapshot(te.storage, workflow_id) == before
    assert te.describe(workflow_id).status == "running"


def test_no_engine_takes_over_a_newer_run(storage_factory: Opener) -> None:
    """An expired claim on a run of a newer format stays with it: no epoch bump, no holder.

    The claims index's takeover is what this checks, so the store is one a release of
    layout 2 set up (a holder item and an index entry per claim); layout 3 takes claims
    over at a wake only, and the wake below is refused the same way."""
    clock = VirtualClock()
    marker = encode({"mode": HEAD_LAYOUT, "established_at": clock()})
    storage_factory().put(keys.meta_key(keys.OWNERSHIP_MODE), marker)
    owner = Engine.create(
        storage_factory(),
        WORKFLOWS,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
    )
    owner.start("sleeper", id="wf-1")  # parked on its sleep, the claim still held
    storage = storage_factory()
    assert storage.get(keys.owner_holder_key("wf-1")) is not None
    stamp(storage, keys.state_key("wf-1"))
    before = snapshot(storage, "wf-1")

    clock.advance(30 + 2 * 5 + 1)  # past expiry and grace, the sleep not yet due
    other = Engine.create(
        storage,
        WORKFLOWS,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=clock,
        recover=False,  # the takeover path alone (recovery is checked above)
    )
    report = other.run_maintenance()
    assert report.parts["claims_reclaimed"] == 0
    assert other.runtime.metrics.counters["records_skipped_unsupported"] == 1
    assert "claim_attempts.takeover" not in other.runtime.metrics.counters
    clock.advance(30)  # the sleep timer is due now: its wake is refused too
    other.run_maintenance()
    assert snapshot(storage, "wf-1") == before


def test_an_engine_refuses_a_store_marked_by_a_newer_release(storage_factory: Opener) -> None:
    storage = storage_factory()
    Engine.create(storage, WORKFLOWS, ownership="workflow-lease", background_tasks="manual")
    marker = keys.meta_key(keys.OWNERSHIP_MODE)
    stamp(storage, marker)
    stored = storage.get(marker)
    with pytest.raises(UnsupportedSchemaVersionError, match="ownership-mode marker"):
        Engine.create(storage, WORKFLOWS, ownership="workflow-lease", background_tasks="manual")
    assert storage.get(marker) == stored


@pytest.mark.parametrize("record", [{"sv": 1, "a": 1}, {"a": 1}])
def test_current_and_unstamped_records_are_read(record: dict[str, Any]) -> None:
    assert decode_record(encode(record), "a record") == record


@pytest.mark.parametrize("version", [2, 0, -1, "1", 1.0, True, None])
def test_any_other_stamp_is_refused(version: object) -> None:
    with pytest.raises(UnsupportedSchemaVersionError) as raised:
        decode_record(encode({"sv": version}), "a record")
    assert raised.value.code == "UnsupportedSchemaVersionError"
    assert raised.value.found == version
    assert raised.value.supported == (1,)


def test_a_direct_put_is_what_the_snapshot_sees(storage_factory: Opener) -> None:
    """The snapshot helper itself notices a changed byte (so equality above means something)."""
    te = make_engine(storage_factory, WORKFLOWS)
    workflow_id = parked(te)
    before = snapshot(te.storage, workflow_id)
    te.storage.batch([Put(keys.state_key(workflow_id), b"\x80")])
    assert snapshot(te.storage, workflow_id) != before


def _awaiter(ctx: Any, _: Any) -> Iterator[Any]:
    return (yield ctx.run("ask"))


def test_an_async_completion_is_refused_on_a_newer_pending_record(storage_factory: Opener) -> None:
    tokens: list[str] = []
    asker = workflow("asker").activities(
        ask=lambda: tokens.append(current_activity().complete_async())
    )
    te = make_engine(storage_factory, {"asker": asker.execute(_awaiter)})
    te.start("asker", id="wf-1")
    [(sort, _)] = te.storage.scan(keys.workflow_partition("wf-1"), keys.PENDING_PREFIX)
    stamp(te.storage, Key(keys.workflow_partition("wf-1"), sort))
    before = snapshot(te.storage, "wf-1")

    with pytest.raises(UnsupportedSchemaVersionError, match="pending activity"):
        te.complete_activity(tokens[0], "yes")
    assert snapshot(te.storage, "wf-1") == before
