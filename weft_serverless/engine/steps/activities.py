"""The ``ctx.run`` step: attempts with retries on the engine clock, async completion, and
reconciliation of idempotent activities after a crash.

Attempt ``n`` of slot ``s`` leaves at most: a retry record (``att#s#n``, with its timer), an
async-pending record (``pend#s@n``) answered by ``asyncres#s#n``, and for an idempotent
activity one "started" record (``actrec#s``) written before the first attempt runs. Retry
records are the step's failure history: the batch writing one deletes the one
``ATTEMPT_HISTORY`` attempts older, so at most that many are kept (numbering reads ``n``).
After a retry of the run, a step it ran again starts afresh (its retry policy and budget
count from there) while its attempts are numbered on after the last (``retry_history``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import Any

from weft_serverless.activity import ActivityContext, Verification
from weft_serverless.codec import decode, encode
from weft_serverless.commands import Run
from weft_serverless.engine.persistence import retry_history, timers
from weft_serverless.engine.persistence.outcomes import (
    Done,
    Outcome,
    RaiseAtYield,
    error_from_record,
)
from weft_serverless.engine.persistence.records import ATTEMPT_HISTORY, error_record
from weft_serverless.engine.persistence.stored_records import AttemptRecord, OpRecord, PendingRecord
from weft_serverless.engine.runs import event_log, outbox
from weft_serverless.engine.runs.commit import commit
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.engine.steps import heartbeats
from weft_serverless.engine.steps.attempt import (
    OUT_OF_TIME,
    Attempt,
    AttemptResult,
    Verdict,
    needs_watching,
    result_of,
    start,
    watch,
)
from weft_serverless.engine.steps.heartbeats import Heartbeats
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.errors import (
    ActivityReconciliationError,
    CodecError,
    PayloadTooLargeError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Op, Put
from weft_serverless.workflow import ActivityDefinition

AGAIN = "again"
"""``conclude``: the failed attempt's retry is due already: prepare the next one now."""


@dataclass(slots=True)
class Ready:
    """An attempt about to start (or, with ``result``, one already answered asynchronously)."""

    cmd: Run
    activity: ActivityDefinition
    encoded_input: bytes
    number: int
    context: ActivityContext
    first: float  # engine time the step's first attempt started: schedule_to_close counts from it
    previous_hb: bytes | None
    prepared_at: float  # engine time ``prepare`` ran: the attempt starts at once after it
    budget_end: float | None  # engine time the step's schedule_to_close runs out (None: never)
    base: int = 0  # the step's last attempt before a retry of the run: the policy counts after
    result: AttemptResult | None = None
    park_failures: list[BaseException] = field(default_factory=list)

    def attempt(self, rt: Runtime) -> Attempt:
        """The attempt to start, its heartbeats wired to the engine."""
        attempt = Attempt(rt, self.cmd, self.context, self.budget_end, self.prepared_at)
        self.context.on_heartbeat = Heartbeats(rt, attempt)
        return attempt


def run(scope: StepScope, cmd: Run, slot: str) -> Done | None:
    rt = scope.rt
    while True:
        ready = prepare(scope, cmd, slot)
        if not isinstance(ready, Ready):
            return ready
        verdict: Verdict
        if ready.result is not None:
            verdict = ready.result
        else:
            attempt = ready.attempt(rt)
            watched = needs_watching(rt, attempt)
            start(rt, ready.activity, ready.encoded_input, attempt, inline=not watched)
            if attempt.future.done():
                verdict = result_of(rt, attempt)
            else:
                [(_, verdict)] = watch(rt, [attempt])
        step = conclude(scope, slot, ready, verdict)
        if not isinstance(step, str):  # AGAIN: the retry is due already
            return step


def prepare(scope: StepScope, cmd: Run, slot: str) -> Done | Ready | None:
    """Everything before an attempt runs: its number, whether it may run now (a retry's
    backoff, an async attempt still out, an idempotent activity's reconciliation, the
    invocation's time, the schedule_to_close budget) and its context."""
    rt, workflow_id = scope.rt, scope.workflow_id
    try:
        encoded_input = rt.encode_payload(cmd.input, f"input of activity {cmd.activity!r}")
    except (CodecError, PayloadTooLargeError) as exc:
        raise RaiseAtYield(exc) from None
    activity = rt.activity(scope.definition, cmd.activity)
    # Read without inserting: an entry per step would make every later step's scan for
    # stale timers (timers.stale_timer_deletes) longer, i.e. a run's cost quadratic.
    attempts: list[AttemptRecord] = scope.history.attempts.get(slot, [])
    base = retry_history.base(scope.history, slot) if scope.history.retries else 0
    if base:  # this round's records only: a retry of the run gave the step a fresh start
        attempts = [record for record in attempts if record.number > base]
    now = rt.now()
    if attempts and not keys.is_due(now, attempts[-1].due or 0.0):
        return None
    number = attempts[-1].number + 1 if attempts else base + 1
    first = float(_step_first_at(attempts[0])) if attempts else now
    previous = attempts[-1].heartbeat if attempts else None
    context = ActivityContext(workflow_id, cmd.activity, number, slot, cmd.idempotency_key)
    context.provide_services = rt.services.provider(cmd.activity, activity.services)
    s2c = cmd.schedule_to_close
    budget_end = None if s2c is None else first + s2c
    ready = Ready(
        cmd, activity, encoded_input, number, context, first, previous, now, budget_end, base
    )
    if scope.history.async_results:
        ready.result = _async_outcome(scope, cmd, slot, number)
        if ready.result is not None:
            return ready
    if scope.history.pending and f"{slot}@{number}" in scope.history.pending:
        return None  # started asynchronously; waiting for complete/fail_activity
    if ready.budget_end is not None and now >= ready.budget_end:
        ready.result = _out_of_budget(ready, "no attempt may start after it")
        return ready
    if cmd.idempotency_key is not None:
        reconciled = _reconcile_or_mark_started(scope, cmd, slot, number, encoded_input)
        if reconciled is not None:
            return reconciled
    if rt.invocation.time_left is not None and rt.low_on_time(cmd.timeout):
        scope.yield_to_next_invocation(slot, number)
        return None
    rt.fence.before_activity(workflow_id)
    if attempts or scope.history.heartbeats:
        context.heartbeat_details = heartbeats.previous_details(scope.history, slot, attempts)
    context.on_async = functools.partial(_park_async, scope, slot, number, ready.park_failures)
    return ready


def conclude(scope: StepScope, slot: str, ready: Ready, verdict: Verdict) -> Done | str | None:
    """Record how an attempt ended: the step's result, a retry (``AGAIN`` when it is due
    already), its final failure; None when nothing is recorded (the attempt was given up
    because the run ended or the branch lost, or it waits for the next invocation or an
    async completion)."""
    rt, workflow_id, cmd, number = scope.rt, scope.workflow_id, ready.cmd, ready.number
    if ready.park_failures:
        raise ready.park_failures[0]  # the drive's error, not the activity's failure
    if isinstance(verdict, str):
        if verdict == OUT_OF_TIME:
            scope.yield_to_next_invocation(slot, number)
        return None  # OUT_OF_TIME, or CANCELLED: given up, nothing recorded
    if ready.result is None and verdict.timeout is None and ready.context.cancelled:
        return None  # it returned after it was told to stop (the run ended): void
    if ready.context.async_token is not None and ready.result is None:
        return None
    # The step's heartbeat record ends with it, in its batch (not a cleanup a crash can cut).
    stale_beat = slot in scope.history.heartbeats or ready.context.latest_heartbeat is not None
    beat_ops: list[Op] = [Delete(keys.heartbeat_key(workflow_id, slot))] if stale_beat else []
    if verdict.ok:
        value = decode(verdict.value) if verdict.value is not None else None
        done = scope.finish(slot, Outcome(value), OpRecord.activity_result(verdict.value, number))
        done.ops.extend(beat_ops)
        return done
    retries = verdict.retryable and number - ready.base < cmd.retry.max_attempts
    due = rt.now() + cmd.retry.backoff(number - ready.base) if retries else None
    budget_end = ready.budget_end
    if due is not None and budget_end is not None and due > budget_end:
        verdict = _out_of_budget(ready, f"retry {number + 1} would start after it", verdict)
        due = None
    failure = AttemptRecord.failed(
        number,
        verdict.error_type,
        verdict.message,
        rt.now(),
        traceback=verdict.traceback,
        started_at=None if ready.result is not None else ready.prepared_at,
    )
    _log_failed_attempt(scope, cmd, slot, failure, due)
    if due is not None:
        rt.metrics.activity_retries += 1
        beat = ready.context.latest_heartbeat or ready.previous_hb
        failure = dataclasses.replace(failure, first_at=ready.first, heartbeat=beat)
        stored = scope.park(
            keys.attempt_key(workflow_id, slot, number),
            failure,
            due,
            timers.RETRY,
            f"{slot}#{number}",
            also=[
                *(
                    [Delete(keys.attempt_key(workflow_id, slot, number - ATTEMPT_HISTORY))]
                    if number > ATTEMPT_HISTORY
                    else []
                ),
                *outbox.item(
                    rt,
                    event_log.attempt_failed_event(
                        scope.history.state,
                        slot,
                        cmd.activity,
                        dataclasses.replace(failure, due=due),
                    ),
                ),
            ],
        )
        attempts = scope.history.attempts.setdefault(slot, [])
        attempts.append(stored)
        del attempts[:-ATTEMPT_HISTORY]
        return AGAIN
    fields: dict[str, Any] = {"activity": cmd.activity, "attempts": number}
    if verdict.timeout is not None:
        fields["timeout"] = verdict.timeout
    # its traceback and start, as a retry record keeps them
    for name, kept in (("tb", failure.traceback), ("s", failure.started_at)):
        if kept is not None:
            fields[name] = kept
    err = error_record("activity", verdict.error_type, verdict.message, **fields)
    done = scope.finish(slot, Outcome(error=error_from_record(err)), OpRecord(ok=False, error=err))
    done.ops.extend(beat_ops)
    return done


def _step_first_at(record: AttemptRecord) -> float:
    """When the step's first attempt was prepared (a record from before that was kept: its
    own failure time)."""
    return record.at if record.first_at is None else record.first_at


def _out_of_budget(ready: Ready, why: str, last: AttemptResult | None = None) -> AttemptResult:
    """The step's final failure once its schedule_to_close budget is spent."""
    cmd = ready.cmd
    message = (
        f"activity {cmd.activity!r} used up its schedule_to_close of {cmd.schedule_to_close}s "
        f"after {ready.number - (last is None)} attempt(s): {why}"
    )
    if last is not None:
        message += f" (attempt {ready.number} failed: {last.error_type}: {last.message})"
    return AttemptResult(
        ok=False,
        error_type="ActivityTimeoutError",
        message=message,
        retryable=False,
        timeout="schedule_to_close",
        traceback=None if last is None else last.traceback,
    )


def _log_failed_attempt(
    scope: StepScope, cmd: Run, slot: str, failure: AttemptRecord, due: float | None
) -> None:
    """One structured WARNING per failed attempt, whether or not it will be retried."""
    step = keys.describe_slot(slot)
    then = "no retry left"
    if due is not None:
        then = "retry at " + dt.datetime.fromtimestamp(due, dt.UTC).isoformat(
            timespec="milliseconds"
        )
    logger.warning(
        "workflow %s: activity %r failed on attempt %d at step %s: %s: %s (%s)",
        scope.workflow_id,
        cmd.activity,
        failure.number,
        step,
        failure.error_type,
        failure.message,
        then,
        extra={
            "workflow_id": scope.workflow_id,
            "workflow_type": scope.definition.name,
            "step": step,
            "activity": cmd.activity,
            "attempt": failure.number,
            "error_type": failure.error_type,
            "error_message": failure.message,
            "next_retry_at": due,
        },
    )


def _async_outcome(scope: StepScope, cmd: Run, slot: str, number: int) -> AttemptResult | None:
    if not scope.history.async_results:
        return None
    record = scope.history.async_results.get(keys.attempt_ref(slot, number))
    if record is None:
        return None
    if record.get("ok"):
        return AttemptResult(ok=True, value=record.get("v"))
    return AttemptResult(
        ok=False,
        error_type=record.get("type", "Error"),
        message=record.get("message", ""),
        retryable=cmd.retry.is_retryable([record.get("type", "Error")], None),
    )


def _park_async(scope: StepScope, slot: str, number: int, failures: list[BaseException]) -> None:
    """Record that the run waits on this attempt's token, inside ``complete_async()``.

    A failure here (a lost commit or claim, a storage error) surfaces in the activity, which
    must not get a token, but it is the engine's: ``failures`` keeps it so the attempt is not
    recorded as the activity failing.
    """
    key = keys.pending_key(scope.workflow_id, f"{slot}@{number}")
    record = PendingRecord(async_attempt=number, at=scope.rt.now())
    try:
        scope.commit_parking([Condition(key, None)], [Put(key, record.to_bytes())], slot)
    except Exception as exc:
        failures.append(exc)
        raise
    scope.history.pending[f"{slot}@{number}"] = record


def _reconcile_or_mark_started(
    scope: StepScope, cmd: Run, slot: str, attempt: int, encoded_input: bytes
) -> Done | None:
    """Before an idempotent activity's attempt runs: record its start, or, when a start of
    this very attempt is recorded with no outcome (a crash cut it), reconcile it."""
    assert cmd.idempotency_key is not None
    rt, workflow_id = scope.rt, scope.workflow_id
    started = keys.attempt_ref(slot, attempt)
    if started not in scope.history.started:
        key = keys.activity_started_key(workflow_id, slot, attempt)
        record = {"key": cmd.idempotency_key, "at": rt.now(), "attempt": attempt}
        commit(rt, workflow_id, [Condition(key, None)], [Put(key, encode(record))])
        scope.history.started[started] = record
        return None
    verify = rt.activity(scope.definition, cmd.activity).verify
    if verify is None:
        raise ActivityReconciliationError(
            f"activity {cmd.activity!r} (idempotency key {cmd.idempotency_key!r}) may have run "
            "before a crash and has no verify(); failing closed rather than running it twice. "
            "Declare it with activity(fn, verify=...)"
        )
    try:
        verdict = verify(decode(encoded_input), cmd.idempotency_key)
    except Exception as exc:
        verdict = Verification.indeterminate()
        rt.metrics.incr("verify_errors")
        scope.log_warning(f"verify of {cmd.activity!r} raised {exc!r}; treated as indeterminate")
    if not isinstance(verdict, Verification) or verdict.kind == "indeterminate":
        raise ActivityReconciliationError(
            f"activity {cmd.activity!r} (idempotency key {cmd.idempotency_key!r}): verify() "
            "could not tell whether it ran before the crash; failing closed"
        )
    rt.metrics.incr(f"reconciled.{verdict.kind}")
    if verdict.kind == "not-completed":
        return None
    if verdict.kind == "completed":
        try:
            data = rt.encode_payload(verdict.result, f"verified result of {cmd.activity!r}")
        except (CodecError, PayloadTooLargeError) as exc:
            raise ActivityReconciliationError(str(exc)) from None
        verified = OpRecord.holding(data, reconciled=True)
        return scope.finish(slot, Outcome(decode(data)), verified)
    err = error_record(
        "activity",
        "ActivityResultUnavailable",
        f"activity {cmd.activity!r} completed before a crash but its result is unavailable",
        activity=cmd.activity,
        attempts=1,
    )
    return scope.finish(slot, Outcome(error=error_from_record(err)), OpRecord(ok=False, error=err))
