"""One attempt of an activity: where it runs, the limits it runs under, what it gave back.

An attempt runs inline on the drive's thread when nothing has to watch it (no time limit,
no invocation deadline, not a branch running beside others); otherwise it runs on the
engine's activity threads (or its event loop, for ``async def``) while the drive watches
its limits. An attempt that passes
a limit is given up at once: its cancel event is set, an ``async def`` one is cancelled, and
whatever it returns later is discarded (Python cannot stop a thread, which is why activities
must be idempotent and should check ``current_activity().cancelled``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from weft_serverless.activity import ActivityContext, set_current
from weft_serverless.codec import decode
from weft_serverless.commands import Run
from weft_serverless.engine.persistence import tracebacks
from weft_serverless.engine.persistence.records import cut_message
from weft_serverless.engine.process.telemetry import pin_step
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import CodecError, PayloadTooLargeError, TimeoutKind
from weft_serverless.storage import keys
from weft_serverless.workflow import ActivityDefinition

if TYPE_CHECKING:  # futures are imported by the first attempt that runs off the drive's thread
    from concurrent.futures import Future

    from weft_serverless.engine.process.activity_threads import Job
    from weft_serverless.engine.process.tracing import RunsOn

POLL_SECONDS = 0.05
"""How often a watching drive looks at its attempts' limits, cancels and the invocation clock
(engine time may be virtual: only looking tells it has moved)."""

CANCELLED = "cancelled"
"""An attempt given up because its run ended or its branch lost: nothing is recorded."""
OUT_OF_TIME = "out-of-time"
"""An attempt given up because the invocation is about to end: it runs again in the next."""


@dataclass(slots=True)
class AttemptResult:
    ok: bool
    value: bytes | None = None
    error_type: str = ""
    message: str = ""
    retryable: bool = True
    timeout: TimeoutKind | None = None
    traceback: str | None = None  # of the exception the activity raised (bounded)


class Ran:
    """How an inline attempt ended: a finished future's answers, without a future's locks
    (the hot path of a plain ``ctx.run``)."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return False

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class Attempt:
    """A started attempt and the clocks its limits are measured on.

    A limit passes when either clock says so: engine time (virtual in tests, moved by
    ``TestEngine.advance``) or real time (which a virtual clock does not see).
    """

    def __init__(
        self,
        rt: Runtime,
        cmd: Run,
        context: ActivityContext,
        budget_end: float | None,
        now: float | None = None,
    ) -> None:
        self.cmd, self.context = cmd, context
        self.started = rt.now() if now is None else now
        self.started_real = time.monotonic()
        self.beat, self.beat_real = self.started, self.started_real
        self.budget_end = budget_end  # engine time when schedule_to_close runs out
        self.future: Future[Any] | Ran = _NOT_STARTED
        self.job: Job | None = None
        self.span: Any = None  # its trace span, when the engine has a tracer

    def step(self) -> str:
        """The step it runs, as log lines and spans name it (``3``, ``1 (branch 2)``)."""
        return keys.describe_slot(self.context.slot)

    def beaten(self, now: float) -> None:
        """A heartbeat arrived: the heartbeat timeout counts from here."""
        self.beat, self.beat_real = now, time.monotonic()

    def overdue(self, now: float) -> TimeoutKind | None:
        real = time.monotonic()
        cmd = self.cmd
        if self.budget_end is not None and (
            now >= self.budget_end or real - self.started_real >= self.budget_end - self.started
        ):
            return "schedule_to_close"
        if cmd.timeout is not None and (
            now - self.started >= cmd.timeout or real - self.started_real >= cmd.timeout
        ):
            return "start_to_close"
        hb = cmd.heartbeat_timeout
        if hb is not None and (now - self.beat >= hb or real - self.beat_real >= hb):
            return "heartbeat"
        return None


def needs_watching(rt: Runtime, attempt: Attempt) -> bool:
    """Whether the attempt runs off the drive's thread, watched: it has a time limit, or an
    invocation's deadline may cut it (except with ``max_parallel_activities=0``, where only
    a time limit moves an attempt off the drive's thread)."""
    cmd = attempt.cmd
    return (
        cmd.timeout is not None
        or cmd.heartbeat_timeout is not None
        or attempt.budget_end is not None
        or (rt.invocation.time_left is not None and not rt.inline_activities)
    )


def start(
    rt: Runtime,
    activity: ActivityDefinition,
    encoded_input: bytes,
    attempt: Attempt,
    *,
    inline: bool,
    wait_for_place: bool = True,
) -> bool:
    """Start ``attempt`` (finished already when ``inline``); False when no thread was free
    and ``wait_for_place`` is False.

    The activity runs in its drive's context (``contextvars``) with its attempt's span
    current, on whichever thread or event-loop task runs it: what it traces nests there.
    """
    rt.metrics.activity_attempts += 1
    rt.attempts.add(attempt.context)
    args = (decode(encoded_input),) if activity.takes_input else ()
    context = attempt.context
    if activity.is_async:
        if rt.tracer is not None:
            _open_span(rt, attempt, "task")
        # the task runs in a copy of this thread's context (call_soon_threadsafe's rule)
        coroutine = _run_async(rt, activity, args, attempt)
        attempt.future = rt.activity_threads.run_coroutine(coroutine)
        return True
    if inline:
        if rt.tracer is not None:
            _open_span(rt, attempt, "drive")
        set_current(context)
        try:
            span = attempt.span
            value = activity.fn(*args) if span is None else _call(rt, attempt, activity, args)
            attempt.future = Ran(value)
        except Exception as exc:
            attempt.future = Ran(error=exc)
        except BaseException as exc:  # not the activity's failure: the drive stops here
            _close_span(rt, attempt, "error", type(exc).__name__)
            raise
        finally:
            set_current(None)
        return True

    drive_context = contextvars.copy_context()

    def call() -> Any:
        return drive_context.run(_call_on_thread, rt, attempt, activity, args)

    # the span opens once a place is taken and before the thread can start the call:
    # a refused submission leaves no span, and the thread always finds its span
    placed = None if rt.tracer is None else lambda: _open_span(rt, attempt, "thread")
    job = rt.activity_threads.submit(call, wait=wait_for_place, placed=placed)
    if job is None:
        rt.metrics.activity_attempts -= 1
        rt.attempts.discard(context)
        return False
    attempt.job, attempt.future = job, job.future
    return True


def _call(
    rt: Runtime, attempt: Attempt, activity: ActivityDefinition, args: tuple[Any, ...]
) -> Any:
    """The activity's call, with its attempt's span current when there is one."""
    span = attempt.span
    if span is None or rt.tracer is None:
        return activity.fn(*args)
    with rt.tracer.activated(span):
        return activity.fn(*args)


def _call_on_thread(
    rt: Runtime, attempt: Attempt, activity: ActivityDefinition, args: tuple[Any, ...]
) -> Any:
    set_current(attempt.context)
    pin_step(attempt.step)
    try:
        return _call(rt, attempt, activity, args)
    finally:
        set_current(None)


def _open_span(rt: Runtime, attempt: Attempt, runs_on: RunsOn) -> None:
    """The attempt's span, a child of its drive's span whichever thread the attempt runs on."""
    assert rt.tracer is not None
    context = attempt.context
    attempt.span = rt.tracer.attempt_started(
        context.workflow_id,
        f"weft activity {context.activity}",
        {
            "weft.workflow_id": context.workflow_id,
            "weft.activity": context.activity,
            "weft.step": attempt.step(),
            "weft.attempt": context.attempt,
        },
        runs_on,
    )


def _close_span(rt: Runtime, attempt: Attempt, outcome: str, error_type: str = "") -> None:
    if attempt.span is not None and rt.tracer is not None:
        rt.tracer.attempt_ended(attempt.span, outcome, error_type)
        attempt.span = None


async def _run_async(
    rt: Runtime, activity: ActivityDefinition, args: tuple[Any, ...], attempt: Attempt
) -> Any:
    set_current(attempt.context)  # this task's own context: other attempts on the loop keep theirs
    pin_step(attempt.step)
    span = attempt.span
    if span is None or rt.tracer is None:
        return await activity.fn(*args)
    with rt.tracer.activated(span):
        return await activity.fn(*args)


def give_up(rt: Runtime, attempt: Attempt, outcome: str = CANCELLED) -> None:
    """Stop waiting for ``attempt``: tell it to stop, and free its place for another."""
    _close_span(rt, attempt, outcome, "ActivityTimeoutError" if outcome == "timed-out" else "")
    attempt.context.cancel_event.set()
    attempt.future.cancel()  # an async attempt's task gets asyncio cancellation
    if attempt.job is not None:
        rt.activity_threads.abandon(attempt.job)
    rt.attempts.discard(attempt.context)


def result_of(rt: Runtime, attempt: Attempt) -> AttemptResult:
    """What a finished attempt gave back, as the step records it."""
    rt.attempts.discard(attempt.context)
    cmd, context = attempt.cmd, attempt.context
    result: AttemptResult
    try:
        value = attempt.future.result()
    except Exception as exc:
        names = [cls.__name__ for cls in type(exc).__mro__]
        result = AttemptResult(
            ok=False,
            error_type=type(exc).__name__,
            message=cut_message(str(exc)),
            retryable=cmd.retry.is_retryable(names, exc),
            traceback=tracebacks.of(exc),
        )
    except BaseException as exc:  # escaped the activity on its thread: the drive stops here
        _close_span(rt, attempt, "error", type(exc).__name__)
        raise
    else:
        if context.async_token is not None:
            result = AttemptResult(ok=True)
        else:
            try:
                data = rt.encode_payload(value, f"result of activity {cmd.activity!r}")
                result = AttemptResult(ok=True, value=data)
            except (CodecError, PayloadTooLargeError) as exc:
                message = cut_message(str(exc))
                result = AttemptResult(
                    ok=False, error_type=exc.code, message=message, retryable=False
                )
    if attempt.span is not None:
        _close_span(rt, attempt, "completed" if result.ok else "failed", result.error_type)
    return result


def timed_out(attempt: Attempt, kind: TimeoutKind) -> AttemptResult:
    """The failure of an attempt given up because a limit passed."""
    cmd = attempt.cmd
    what = {
        "start_to_close": f"ran past its timeout of {cmd.timeout}s",
        "heartbeat": f"sent no heartbeat for {cmd.heartbeat_timeout}s (heartbeat_timeout)",
        "schedule_to_close": f"ran past the step's schedule_to_close of {cmd.schedule_to_close}s",
    }[kind]
    return AttemptResult(
        ok=False,
        error_type="ActivityTimeoutError",
        message=f"activity {cmd.activity!r} attempt {attempt.context.attempt} {what}",
        retryable=kind != "schedule_to_close"
        and cmd.retry.is_retryable(["ActivityTimeoutError", "WeftError"], None),
        timeout=kind,
    )


_NOT_STARTED = Ran(error=RuntimeError("the attempt has not started"))

Verdict = AttemptResult | str
"""How a watched attempt ended: its result, ``CANCELLED`` or ``OUT_OF_TIME``."""


def watch(
    rt: Runtime, running: Sequence[Attempt], until: Callable[[], bool] | None = None
) -> list[tuple[Attempt, Verdict]]:
    """Wait until at least one attempt of ``running`` finishes or is given up; return those
    (none when ``until()`` turned true first).

    Never waits for a given-up attempt: a passed limit, a cancel (the run ended, the branch
    lost) or the invocation's end gives it up at once.
    """
    while True:
        now = rt.now()
        out_of_time = rt.time_left is not None and rt.low_on_time(None)
        ended: list[tuple[Attempt, Verdict]] = []
        for attempt in running:
            if attempt.future.done():
                ended.append((attempt, result_of(rt, attempt)))
                continue
            verdict: Verdict | None = None
            if attempt.context.cancel_event.is_set():
                verdict = CANCELLED
            elif (kind := attempt.overdue(now)) is not None:
                verdict = timed_out(attempt, kind)
                rt.metrics.incr(f"activity_timeouts.{kind}")
            elif out_of_time:
                verdict = OUT_OF_TIME
            if verdict is not None:
                give_up(rt, attempt, verdict if isinstance(verdict, str) else "timed-out")
                ended.append((attempt, verdict))
        if ended or (until is not None and until()):
            return ended
        from concurrent.futures import FIRST_COMPLETED, wait

        futures = [a.future for a in running if not isinstance(a.future, Ran)]
        wait(futures, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)


def run_attempt(
    rt: Runtime,
    activity: ActivityDefinition,
    cmd: Run,
    encoded_input: bytes,
    context: ActivityContext,
    *,
    budget_end: float | None = None,
) -> Verdict:
    """Run one attempt to its end (or until it is given up); never raises for the activity's
    own failure."""
    attempt = Attempt(rt, cmd, context, budget_end)
    watched = needs_watching(rt, attempt)
    start(rt, activity, encoded_input, attempt, inline=not watched)
    if attempt.future.done():
        return result_of(rt, attempt)
    [(_, verdict)] = watch(rt, [attempt])
    return verdict
