"""Bulk operations: ``cancel_all``, ``signal_all``, ``retry_failed_all`` (ADR 0031).

Rules pinned here: a dry run writes nothing and returns the count and a token; the real call
refuses (typed, nothing written) without the token, with a malformed or expired one, or with
one issued for another kind, argument or filter; it acts on every matching run exactly once,
a page at a time; a crash mid-operation is finished by ``resume_bulk`` or by a maintenance
pass once the operation's timer falls due, acting on no run twice; an operation low on
invocation time stops at a page boundary and maintenance finishes it; the stored record is
the audit record and outlives the runs' purge.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    WriteCount,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
    puts_state,
    recover_fresh,
)

from weft_serverless import (
    BulkConfirmationError,
    BulkOperation,
    BulkOperationNotFoundError,
    BulkPreview,
    InvalidArgumentError,
    RetryPolicy,
    WorkflowDefinition,
    workflow,
)
from weft_serverless.engine.bulk import operation as bulk
from weft_serverless.engine.bulk import request as bulk_request
from weft_serverless.engine.bulk.operation import GRACE
from weft_serverless.engine.bulk.request import TOKEN_TTL
from weft_serverless.engine.persistence.stored_records import TimerRecord
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine


def _collect(ctx: Any, _: Any) -> Any:
    """Returns the first two ``msg`` signals it receives (a repeat would show in it)."""
    first = yield ctx.wait_for_signal("msg")
    second = yield ctx.wait_for_signal("msg")
    return [first, second]


def _idle(ctx: Any, _: Any) -> Any:
    yield ctx.sleep(3600)
    return "slept"


def _workflows(calls: Calls, broken: list[bool]) -> dict[str, WorkflowDefinition]:
    def fragile(value: str) -> str:
        calls.log.append(("fragile", value))
        if broken[0]:
            raise RuntimeError("disk full")
        return value.upper()

    def pipeline(ctx: Any, value: str) -> Any:
        return (yield ctx.run("fragile", value, retry=RetryPolicy(max_attempts=1)))

    return {
        "collect": workflow("collect").execute(_collect),
        "idle": workflow("idle").execute(_idle),
        "pipeline": workflow("pipeline").activities(fragile=fragile).execute(pipeline),
    }


def _engine(storage_factory: Opener, **options: Any) -> tuple[TestEngine, Calls, list[bool]]:
    calls, broken = Calls(), [False]
    return make_engine(storage_factory, _workflows(calls, broken), **options), calls, broken


def _start(te: TestEngine, workflow_type: str, count: int, value: Any = None) -> list[str]:
    ids = [f"{workflow_type}-{n}" for n in range(count)]
    for workflow_id in ids:
        te.start(workflow_type, value if value is not None else workflow_id, id=workflow_id)
    return ids


def _preview(result: BulkPreview | BulkOperation) -> BulkPreview:
    assert isinstance(result, BulkPreview)
    return result


def _operation(result: BulkPreview | BulkOperation) -> BulkOperation:
    assert isinstance(result, BulkOperation)
    return result


# -- dry run and confirmation ----------------------------------------------------------------


def test_dry_run_counts_the_matching_runs_and_writes_nothing(storage_factory: Opener) -> None:
    te, _, _ = _engine(storage_factory)
    _start(te, "collect", 3)
    _start(te, "idle", 2)
    writes = WriteCount.of(te.storage)
    preview = _preview(te.cancel_all(status="running", workflow_type="collect", dry_run=True))
    assert (preview.kind, preview.count) == ("cancel", 3)
    assert preview.filters == {"status": "running", "workflow_type": "collect"}
    assert preview.expires_at == te.clock() + TOKEN_TTL
    assert isinstance(preview.token, str) and preview.token
    assert _preview(te.cancel_all(dry_run=True)).count == 5
    assert _preview(te.retry_failed_all(dry_run=True)).count == 0
    assert WriteCount.of(te.storage) == writes
    assert te.list_bulk_operations() == []


def test_the_real_call_refuses_a_missing_bad_or_foreign_token(storage_factory: Opener) -> None:
    """Each refusal is typed, names its reason, and writes nothing."""
    te, _, _ = _engine(storage_factory)
    ids = _start(te, "collect", 2)
    token = _preview(te.cancel_all(workflow_type="collect", dry_run=True)).token
    signal_token = _preview(te.signal_all("msg", 1, workflow_type="collect", dry_run=True)).token
    writes = WriteCount.of(te.storage)
    attempts: list[tuple[str, Any]] = [
        ("missing", lambda: te.cancel_all(workflow_type="collect")),
        ("malformed", lambda: te.cancel_all(workflow_type="collect", confirm="yes")),
        ("mismatch", lambda: te.cancel_all(workflow_type="idle", confirm=token)),
        ("mismatch", lambda: te.cancel_all(confirm=token)),
        ("mismatch", lambda: te.retry_failed_all(workflow_type="collect", confirm=token)),
        ("mismatch", lambda: te.cancel_all(workflow_type="collect", confirm=signal_token)),
        (
            "mismatch",
            lambda: te.signal_all("msg", 2, workflow_type="collect", confirm=signal_token),
        ),
        (
            "mismatch",
            lambda: te.signal_all("other", 1, workflow_type="collect", confirm=signal_token),
        ),
        ("mismatch", lambda: te.cancel_all(workflow_type="collect", confirm=token[:-1] + "0")),
    ]
    for reason, attempt in attempts:
        with pytest.raises(BulkConfirmationError) as refused:
            attempt()
        assert refused.value.reason == reason
        assert refused.value.code == "BulkConfirmationError"
    te.clock.advance(TOKEN_TTL + 1)
    with pytest.raises(BulkConfirmationError) as expired:
        te.cancel_all(workflow_type="collect", confirm=token)
    assert expired.value.reason == "expired"
    assert WriteCount.of(te.storage).items == writes.items
    assert te.list_bulk_operations() == []
    assert {te.describe(workflow_id).status for workflow_id in ids} == {"running"}


def test_bad_arguments_are_typed_errors_and_nothing_is_stored(storage_factory: Opener) -> None:
    te, _, _ = _engine(storage_factory)
    _start(te, "collect", 1)
    writes = WriteCount.of(te.storage)
    with pytest.raises(InvalidArgumentError) as unknown:
        te.cancel_all(colour="red", dry_run=True)
    assert unknown.value.field == "colour"
    with pytest.raises(InvalidArgumentError):
        te.cancel_all(status="sleeping", dry_run=True)
    with pytest.raises(InvalidArgumentError) as not_failed:
        te.retry_failed_all(status="running", dry_run=True)
    assert not_failed.value.field == "status"
    with pytest.raises(InvalidArgumentError):
        te.signal_all("", dry_run=True)
    with pytest.raises(InvalidArgumentError) as page:
        te.cancel_all(page_size=0, dry_run=True)
    assert page.value.field == "page_size"
    with pytest.raises(InvalidArgumentError):
        te.cancel_all(reason=42, dry_run=True)
    with pytest.raises(BulkOperationNotFoundError):
        te.describe_bulk("nope")
    with pytest.raises(BulkOperationNotFoundError):
        te.resume_bulk("nope")
    with pytest.raises(InvalidArgumentError):
        te.describe_bulk("")
    assert WriteCount.of(te.storage).items == writes.items


# -- acting on every matching run once -------------------------------------------------------


def test_cancel_all_cancels_every_matching_run_a_page_at_a_time(storage_factory: Opener) -> None:
    te, _, _ = _engine(storage_factory)
    collect = _start(te, "collect", 5)
    idle = _start(te, "idle", 2)
    token = _preview(te.cancel_all(workflow_type="collect", dry_run=True)).token
    op = _operation(te.cancel_all(workflow_type="collect", confirm=token, page_size=2))
    assert (op.kind, op.status, op.done, op.skipped, op.failed) == ("cancel", "completed", 5, 0, 0)
    assert op.cursor is None and op.finished_at == te.clock()
    assert {te.describe(w).status for w in collect} == {"cancelled"}
    assert {te.describe(w).status for w in idle} == {"running"}
    assert te.describe_bulk(op.id) == op


def test_signal_all_signals_each_matching_run_once(storage_factory: Opener) -> None:
    te, _, _ = _engine(storage_factory)
    ids = _start(te, "collect", 5)
    token = _preview(te.signal_all("msg", "bulk", status="running", dry_run=True)).token
    op = _operation(te.signal_all("msg", "bulk", status="running", confirm=token, page_size=2))
    assert (op.signal, op.done, op.skipped) == ("msg", 5, 0)
    for workflow_id in ids:
        te.signal(workflow_id, "msg", "own")
        assert te.describe(workflow_id).result == ["bulk", "own"]


def test_retry_failed_all_retries_only_failed_runs(storage_factory: Opener) -> None:
    te, calls, broken = _engine(storage_factory)
    broken[0] = True
    ids = _start(te, "pipeline", 3)
    _start(te, "idle", 1)
    broken[0] = False
    preview = _preview(te.retry_failed_all(dry_run=True))
    assert preview.count == 3 and preview.filters == {"status": "failed"}
    op = _operation(te.retry_failed_all(confirm=preview.token, page_size=2))
    assert (op.done, op.skipped, op.failed) == (3, 0, 0)
    assert [te.describe(w).result for w in ids] == ["PIPELINE-0", "PIPELINE-1", "PIPELINE-2"]
    assert calls.count("fragile") == 6


def test_runs_matching_when_a_page_is_read_are_acted_on(storage_factory: Opener) -> None:
    """The count need not be unchanged: a run started after the dry run is cancelled too."""
    te, _, _ = _engine(storage_factory)
    _start(te, "collect", 2)
    token = _preview(te.cancel_all(workflow_type="collect", dry_run=True)).token
    te.start("collect", id="late")
    op = _operation(te.cancel_all(workflow_type="collect", confirm=token))
    assert op.done == 3 and te.describe("late").status == "cancelled"


# -- resuming ---------------------------------------------------------------------------------


def test_a_crash_mid_signal_all_is_resumed_without_repeats(storage_factory: Opener) -> None:
    calls, broken = Calls(), [False]
    te, crashing = crashable_engine(storage_factory, _workflows(calls, broken))
    ids = _start(te, "collect", 5)
    token = _preview(te.signal_all("msg", "bulk", dry_run=True)).token
    crashing.arm(puts_prefix("sig#", "collect-2"), after=True)  # the third run's signal
    with expect_crash():
        te.signal_all("msg", "bulk", confirm=token, page_size=2)
    recover_fresh(te, storage_factory)
    [stored] = te.list_bulk_operations()
    assert (stored.status, stored.done) == ("running", 2)  # the first page was saved
    op = te.resume_bulk(stored.id)
    # The third run, signalled before the crash on a page not saved then, is not signalled
    # again, and counts as done: the counts are exact.
    assert (op.status, op.done, op.skipped) == ("completed", 5, 0)
    for workflow_id in ids:
        te.signal(workflow_id, "msg", "own")
        assert te.describe(workflow_id).result == ["bulk", "own"]
    assert te.resume_bulk(op.id) == op  # completed: nothing more to do


def test_a_crash_mid_retry_all_retries_no_run_twice(storage_factory: Opener) -> None:
    """The third run, retried just before the crash, fails again before the operation is
    resumed: it is listed as failed again, and its marker keeps it from a second retry."""
    calls, broken = Calls(), [True]
    te, crashing = crashable_engine(storage_factory, _workflows(calls, broken))
    ids = _start(te, "pipeline", 4)
    token = _preview(te.retry_failed_all(dry_run=True)).token
    crashing.arm(puts_state("pipeline-2"), after=True)
    with expect_crash():
        te.retry_failed_all(confirm=token, page_size=2)
    recover_fresh(te, storage_factory)  # recovery drives the retried run: it fails again
    assert te.describe("pipeline-2").status == "failed"
    op = te.resume_bulk(te.list_bulk_operations()[0].id)
    assert (op.status, op.done, op.skipped) == ("completed", 4, 0)
    tries = [sum(1 for name, arg in calls.log if arg == w) for w in ids]
    assert tries == [2, 2, 2, 2]


def test_maintenance_finishes_an_abandoned_operation(storage_factory: Opener) -> None:
    calls, broken = Calls(), [False]
    te, crashing = crashable_engine(storage_factory, _workflows(calls, broken))
    ids = _start(te, "collect", 5)
    token = _preview(te.cancel_all(dry_run=True)).token
    crashing.arm(puts_state("collect-3"), after=True)
    with expect_crash():
        te.cancel_all(confirm=token, page_size=2)
    recover_fresh(te, storage_factory)
    te.advance(1)  # the operation's timer is not due yet: it may still be progressing
    assert te.list_bulk_operations()[0].status == "running"
    te.advance(GRACE)
    [op] = te.list_bulk_operations()
    assert op.status == "completed" and op.cursor is None
    assert {te.describe(w).status for w in ids} == {"cancelled"}
    te.advance(GRACE * 2)
    store = storage_factory()
    kinds = [
        TimerRecord.from_bytes(value).kind
        for shard in range(keys.TIMER_SHARDS)
        for _, value in store.scan(keys.timer_partition(shard))
    ]
    assert "bulk" not in kinds  # its timer is gone


def test_low_on_time_stops_at_a_page_boundary_and_maintenance_goes_on(
    storage_factory: Opener,
) -> None:
    te, _, _ = _engine(storage_factory)
    ids = _start(te, "collect", 5)
    token = _preview(te.cancel_all(dry_run=True)).token
    with te.engine.invocation(time_left=lambda: 0.5):
        op = _operation(te.cancel_all(confirm=token, page_size=2))
    assert (op.status, op.done) == ("running", 2)
    assert sum(te.describe(w).status == "cancelled" for w in ids) == 2
    te.advance(0.001)  # left due now: the next pass carries on
    op = te.describe_bulk(op.id)
    assert (op.status, op.done) == ("completed", 5)


# -- the audit record -------------------------------------------------------------------------


def test_the_audit_record_says_who_when_what_and_outlives_a_purge(
    storage_factory: Opener,
) -> None:
    te, _, _ = _engine(storage_factory, engine_id="engine-7")
    ids = _start(te, "collect", 2)
    _start(te, "idle", 1)
    filters = {"workflow_type": "collect"}
    token = _preview(te.cancel_all(dry_run=True, **filters)).token
    started = te.clock()
    first = _operation(te.cancel_all(confirm=token, reason="incident 42", **filters))
    te.clock.advance(1)  # ids order operations by their creation time (ms)
    token = _preview(te.cancel_all(dry_run=True, status="running")).token
    second = _operation(te.cancel_all(confirm=token, status="running", actor="alice"))
    for workflow_id in ids:
        te.purge(workflow_id)
    [one, two] = te.list_bulk_operations()
    assert one == first and two == second
    assert one.as_dict() == {
        "id": first.id,
        "kind": "cancel",
        "status": "completed",
        "filters": filters,
        "actor": "engine-7",
        "caller": None,
        "reason": "incident 42",
        "created_at": started,
        "updated_at": started,
        "finished_at": started,
        "done": 2,
        "skipped": 0,
        "failed": 0,
        "signal": None,
        "cursor": None,
        "errors": [],
        "matched": 2,
    }
    assert (two.actor, two.done, two.filters) == ("alice", 1, {"status": "running"})
    assert te.describe_bulk(first.id) == first


def test_maintenance_continues_within_the_invocation_budget(storage_factory: Opener) -> None:
    """A pass low on invocation time continues an abandoned operation by one page only and
    leaves its timer due; the next pass finishes it."""
    calls, broken = Calls(), [False]
    te, crashing = crashable_engine(storage_factory, _workflows(calls, broken))
    ids = _start(te, "collect", 6)
    token = _preview(te.cancel_all(status="running", dry_run=True)).token
    crashing.arm(puts_state("collect-1"), after=True)
    with expect_crash():
        te.cancel_all(status="running", confirm=token, page_size=2)
    recover_fresh(te, storage_factory)
    with te.engine.invocation(time_left=lambda: 0.5):
        te.advance(GRACE + 1)
    [op] = te.list_bulk_operations()
    assert (op.status, op.done) == ("running", 2)  # the runs of its first page after the crash
    assert sum(te.describe(w).status == "cancelled" for w in ids) == 4
    te.advance(0.001)
    assert te.list_bulk_operations()[0].status == "completed"
    assert {te.describe(w).status for w in ids} == {"cancelled"}


@pytest.mark.parametrize("ownership", ["lease", "workflow-lease"])
def test_bulk_operations_under_the_fenced_modes(storage_factory: Opener, ownership: str) -> None:
    te, _, _ = _engine(storage_factory, ownership=ownership)
    ids = _start(te, "collect", 3)
    token = _preview(te.signal_all("msg", "bulk", dry_run=True)).token
    assert _operation(te.signal_all("msg", "bulk", confirm=token, page_size=2)).done == 3
    token = _preview(te.cancel_all(dry_run=True)).token
    assert _operation(te.cancel_all(confirm=token, page_size=2)).done == 3
    assert {te.describe(w).status for w in ids} == {"cancelled"}


def test_a_worker_overtaken_by_another_stops_and_acts_on_no_run_twice(
    storage_factory: Opener,
) -> None:
    """Two workers on one operation (a slow inline call, and maintenance or a resume on
    another engine): the one whose page write loses stops and reports the stored record;
    no run gets the signal twice."""
    te, _, _ = _engine(storage_factory)
    other, _, _ = _engine(storage_factory, clock=te.clock)
    ids = _start(te, "collect", 5)
    token = _preview(te.signal_all("msg", "bulk", dry_run=True)).token
    request = bulk_request.build(te.runtime, "signal", {}, "msg", "bulk")
    bulk_request.check_token(te.runtime, request, token)
    operation_id = bulk.create(
        te.runtime, request, actor="a", caller=None, reason=None, page_size=2
    )
    overtaken: list[BulkOperation] = []

    def after_first_page() -> None:
        if not overtaken:  # the other worker runs the whole operation meanwhile
            overtaken.append(other.resume_bulk(operation_id))

    stale = bulk.advance(te.runtime, operation_id, lambda: False, lambda _: None, after_first_page)
    [finished] = overtaken
    assert finished.status == "completed" and stale == finished
    # The first page was the stale worker's: its runs are met again, and counted once.
    assert (finished.done, finished.skipped) == (5, 0)
    for workflow_id in ids:
        te.signal(workflow_id, "msg", "own")
        assert te.describe(workflow_id).result == ["bulk", "own"]


def test_bulk_operations_take_the_visibility_filters(storage_factory: Opener) -> None:
    """A search attribute and a tag select the runs a bulk cancel acts on."""

    def wait(ctx: Any, _: Any) -> Any:
        return (yield ctx.wait_for_signal("go"))

    flows = {"order": workflow("order", search_attributes={"customer": str}).execute(wait)}
    te = TestEngine(flows, storage=storage_factory())
    for i in range(4):
        te.start(
            "order",
            id=f"o-{i}",
            search_attributes={"customer": "c-7" if i % 2 else "c-8"},
            tags=["vip"] if i == 3 else [],
        )
    preview = te.engine.cancel_all(where={"customer": "c-7"}, dry_run=True)
    assert preview.count == 2
    te.engine.cancel_all(where={"customer": "c-7"}, confirm=preview.token)
    statuses = {f"o-{i}": te.describe(f"o-{i}").status for i in range(4)}
    assert statuses == {
        "o-0": "running",
        "o-1": "cancelled",
        "o-2": "running",
        "o-3": "cancelled",
    }
