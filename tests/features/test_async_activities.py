"""Async activities: ``current_activity().complete_async()`` hands out a token; the workflow
parks until ``engine.complete_activity(token, result)`` or ``fail_activity(token, error)``.

Rules pinned here: a completion resumes the run with its result; a token is single use and a
garbage token is ``ActivityTokenNotFoundError``; an oversized or unencodable result is refused
before anything is written and the token stays usable; a completion acknowledged just before a
crash, or arriving while the run is being recovered, is delivered; a failure follows the
activity's retry policy (the activity runs again and hands out a new token).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from feature_support import (
    KeyCrash,
    Opener,
    WriteCount,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_prefix,
    recover_fresh,
    refused,
    snapshot,
)

from weft_serverless import (
    ActivityTokenNotFoundError,
    CodecError,
    PayloadTooLargeError,
    RetryPolicy,
    WorkflowDefinition,
    current_activity,
    workflow,
)
from weft_serverless.activity import encode_token
from weft_serverless.errors import StorageUnavailableError
from weft_serverless.storage import keys
from weft_serverless.testing import CrashingStorage, TestEngine

WF = "wf-approval"
RETRY = RetryPolicy(max_attempts=2, initial_backoff=5)


class Approvals:
    """The outside world: receives the tokens the activity hands out, and what was recorded."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.recorded: list[Any] = []

    def request(self, document: str) -> None:
        self.tokens.append(current_activity().complete_async())

    def record(self, decision: Any) -> None:
        self.recorded.append(decision)


def _approval(ctx: Any, document: str) -> Any:
    try:
        decision = yield ctx.run("request", document, retry=RETRY)
    except Exception as exc:
        return {"failed": getattr(exc, "error_type", type(exc).__name__)}
    yield ctx.run("record", decision)
    return {"decision": decision}


def _workflows(world: Approvals) -> dict[str, WorkflowDefinition]:
    builder = workflow("approval").activities(request=world.request, record=world.record)
    return {"approval": builder.execute(_approval)}


def _engine(storage_factory: Opener, world: Approvals, **options: Any) -> TestEngine:
    return make_engine(storage_factory, _workflows(world), **options)


def test_completion_resumes_the_workflow(storage_factory: Opener) -> None:
    """Normal path: the run parks on the token; the completion's result is the step's value."""
    world = Approvals()
    te = _engine(storage_factory, world)
    te.start("approval", "doc-1", id=WF)
    assert te.describe(WF).status == "running"
    assert len(world.tokens) == 1
    te.complete_activity(world.tokens[0], {"by": "ann", "ok": True})
    assert te.describe(WF).result == {"decision": {"by": "ann", "ok": True}}
    assert world.recorded == [{"by": "ann", "ok": True}]


def test_a_token_is_single_use(storage_factory: Opener) -> None:
    """A second completion or failure on a used token is ``ActivityTokenNotFoundError``."""
    world = Approvals()
    te = _engine(storage_factory, world)
    te.start("approval", "doc-1", id=WF)
    token = world.tokens[0]
    te.complete_activity(token, "yes")
    with pytest.raises(ActivityTokenNotFoundError):
        te.complete_activity(token, "again")
    with pytest.raises(ActivityTokenNotFoundError):
        te.fail_activity(token, "too late")
    assert te.describe(WF).result == {"decision": "yes"}


GARBAGE_TOKENS: list[tuple[str, str]] = [
    ("empty", ""),
    ("garbage", "not-a-token!"),
    ("base64", "dGhpcyBpcyBub3QgYSB0b2tlbg"),  # valid base64, wrong shape
    ("unknown-run", encode_token("nobody", keys.step_slot(0), 1)),
    ("wrong-attempt", encode_token(WF, keys.step_slot(0), 2)),  # an attempt that never ran
    ("wrong-step", encode_token(WF, keys.step_slot(5), 1)),  # a step it never reached
]


def test_garbage_tokens_are_refused_without_writing(storage_factory: Opener) -> None:
    """Anything but a live token is ``ActivityTokenNotFoundError`` and writes nothing; the
    live token still works afterwards."""
    world = Approvals()
    te = _engine(storage_factory, world)
    te.start("approval", "doc-1", id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    for case, token in GARBAGE_TOKENS:
        with refused(f"complete {case}", ActivityTokenNotFoundError):
            te.complete_activity(token, "yes")
        with refused(f"fail {case}", ActivityTokenNotFoundError):
            te.fail_activity(token, "no")
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes
    te.complete_activity(world.tokens[0], "yes")
    assert te.describe(WF).result == {"decision": "yes"}


@pytest.mark.parametrize(
    ("result", "error"),
    [("x" * 5000, PayloadTooLargeError), (object(), CodecError)],
    ids=["oversized", "unencodable"],
)
def test_bad_results_are_refused_and_the_token_stays_usable(
    storage_factory: Opener, result: Any, error: type[Exception]
) -> None:
    """A result the store cannot take is refused before any write; the same token then
    completes the activity with a good result."""
    world = Approvals()
    te = _engine(storage_factory, world, max_payload_bytes=4096)
    te.start("approval", "doc-1", id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    with pytest.raises(error):
        te.complete_activity(world.tokens[0], result)
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes
    te.complete_activity(world.tokens[0], "fits")
    assert te.describe(WF).result == {"decision": "fits"}


def test_failure_follows_the_retry_policy_with_a_new_token(storage_factory: Opener) -> None:
    """``fail_activity`` is a failed attempt: after the backoff (not before) the activity runs
    again and hands out a new token; the old one is spent; exhausting the attempts raises
    ``ActivityFailedError`` (with the failure's type) at the workflow's yield."""
    world = Approvals()
    te = _engine(storage_factory, world)
    te.start("approval", "doc-1", id=WF)
    first = world.tokens[0]
    te.fail_activity(first, PermissionError("reviewer away"))
    assert te.describe(WF).status == "running"
    te.advance(4.9)
    assert len(world.tokens) == 1
    te.advance(0.2)
    assert len(world.tokens) == 2
    second = world.tokens[1]
    assert second != first
    with pytest.raises(ActivityTokenNotFoundError):
        te.complete_activity(first, "late")
    te.fail_activity(second, PermissionError("still away"))
    assert te.describe(WF).result == {"failed": "PermissionError"}


def test_failure_then_completion_on_the_retry(storage_factory: Opener) -> None:
    """A retried attempt's token completes the activity normally."""
    world = Approvals()
    te = _engine(storage_factory, world)
    te.start("approval", "doc-1", id=WF)
    te.fail_activity(world.tokens[0], "network")
    te.advance(5)
    te.complete_activity(world.tokens[1], "yes")
    assert te.describe(WF).result == {"decision": "yes"}


def test_completion_acknowledged_just_before_a_crash_is_delivered(
    storage_factory: Opener,
) -> None:
    """Crash right after the completion's write (the caller saw a crash, the store has it): a
    fresh engine resumes the run with that result, once; the token is then spent."""
    world = Approvals()
    te, crashing = crashable_engine(storage_factory, _workflows(world))
    te.start("approval", "doc-1", id=WF)
    crashing.arm(puts_prefix(keys.ASYNC_RESULT_PREFIX, WF), after=True)
    with expect_crash():
        te.complete_activity(world.tokens[0], "yes")
    assert world.recorded == []
    recover_fresh(te, storage_factory)
    te.run_maintenance()
    assert te.describe(WF).result == {"decision": "yes"}
    assert world.recorded == ["yes"]
    with pytest.raises(ActivityTokenNotFoundError):
        te.complete_activity(world.tokens[0], "again")


class _AfterHistoryRead(CrashingStorage):
    """Calls ``hook`` once, right after the first full read of ``workflow_id``'s partition
    (the recovering drive's history read), before that drive goes on."""

    def __init__(self, inner: Any, workflow_id: str) -> None:
        super().__init__(inner)
        self.partition = keys.workflow_partition(workflow_id)
        self.hook: Any = None

    def _scan(self, partition: str, rng: Any, limit: int | None, reverse: bool) -> Any:
        pairs = list(super()._scan(partition, rng, limit, reverse))
        if partition == self.partition and limit is None and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return iter(pairs)


def test_completion_arriving_during_recovery_is_kept(storage_factory: Opener) -> None:
    """The completion lands after the recovering drive read the history (so that drive parks
    again on stale data): it is not lost; the run completes with it, once."""
    world = Approvals()
    te = _engine(storage_factory, world)
    te.start("approval", "doc-1", id=WF)
    token = world.tokens[0]
    te.crash()
    hooked = _AfterHistoryRead(storage_factory(), WF)
    fresh = TestEngine(te.workflows, storage=hooked, clock=te.clock, recover=False)
    hooked.hook = lambda: fresh.complete_activity(token, "during recovery")
    assert fresh.recover_all() == 1
    fresh.run_maintenance()
    assert fresh.describe(WF).result == {"decision": "during recovery"}
    assert world.recorded == ["during recovery"]


def test_no_token_escapes_before_the_wait_is_recorded(storage_factory: Opener) -> None:
    """A crash while recording that the run waits on a token happens inside
    ``complete_async()``, before it returns: no token was handed out. The recovered run asks
    again, hands out the token once, and its completion is accepted."""
    world = Approvals()
    te, crashing = crashable_engine(storage_factory, _workflows(world))
    crashing.arm(puts_prefix(keys.PENDING_PREFIX, WF), after=False)
    with expect_crash():
        te.start("approval", "doc-1", id=WF)
    assert world.tokens == []
    recover_fresh(te, storage_factory)
    assert len(world.tokens) == 1
    te.complete_activity(world.tokens[0], "yes")
    assert te.describe(WF).result == {"decision": "yes"}


def test_completion_racing_the_attempts_return_is_kept(storage_factory: Opener) -> None:
    """The token is valid from the moment ``complete_async()`` returns it: a completion sent
    (from another thread) before the activity function returns is accepted and delivered."""
    errors: list[BaseException] = []
    holder: dict[str, TestEngine] = {}

    def request(document: str) -> None:
        token = current_activity().complete_async()

        def callback() -> None:
            try:
                holder["te"].complete_activity(token, "fast")
            except Exception as exc:  # recorded; the assertion below reports it
                errors.append(exc)

        thread = threading.Thread(target=callback)
        thread.start()
        thread.join()

    builder = workflow("approval").activities(request=request, record=lambda _: None)
    te = make_engine(storage_factory, {"approval": builder.execute(_approval)})
    holder["te"] = te
    te.start("approval", "doc-1", id=WF)
    te.run_maintenance()
    assert errors == []
    assert te.describe(WF).result == {"decision": "fast"}


class _RefusesOneWrite(KeyCrash):
    """Fails the first write putting a matching key with a transient storage error (nothing
    applied), as a busy store would after the adapter's retries."""

    def _write(self, apply: Any) -> bool:
        if self.crash_before_write == self.writes + 1:
            self.writes += 1
            self.crash_before_write = None
            raise StorageUnavailableError("injected: the store was busy")
        return super()._write(apply)


def test_a_failed_wait_record_is_not_the_activitys_failure(storage_factory: Opener) -> None:
    """When recording that the run waits on a token fails inside ``complete_async()`` (a
    busy store here; a racing writer or a lost claim elsewhere), that engine error is the
    drive's, not the activity's: no failed attempt is stored, no retry is spent, and the
    recovered run asks again and completes with the token it hands out."""
    world = Approvals()
    refusing = _RefusesOneWrite(storage_factory())
    te = TestEngine(_workflows(world), storage=refusing)
    refusing.arm(puts_prefix(keys.PENDING_PREFIX, WF), after=False)
    with contextlib.suppress(StorageUnavailableError):
        te.start("approval", "doc-1", id=WF)
    assert world.tokens == []
    stored = dict(refusing.inner.scan(keys.workflow_partition(WF), keys.ATTEMPT_PREFIX))
    assert stored == {}, "the engine's write error was stored as a failed attempt"
    recover_fresh(te, storage_factory)
    assert len(world.tokens) == 1
    te.complete_activity(world.tokens[0], "yes")
    assert te.describe(WF).result == {"decision": "yes"}
