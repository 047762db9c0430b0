"""Running one attempt of an activity, with its per-attempt timeout.

A timed-out synchronous attempt cannot be killed in Python; it is abandoned on a daemon
thread and its eventual result ignored, which is why activities must be idempotent.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from weft_serverless.activity import ActivityContext, set_current
from weft_serverless.codec import decode
from weft_serverless.commands import Run
from weft_serverless.errors import ActivityTimeoutError, CodecError, PayloadTooLargeError
from weft_serverless.workflow import ActivityDefinition

from ..records import cut_message
from ..runtime import Runtime


@dataclass(slots=True)
class AttemptResult:
    ok: bool
    value: bytes | None = None
    error_type: str = ""
    message: str = ""
    retryable: bool = True


def run_attempt(
    rt: Runtime,
    activity: ActivityDefinition,
    cmd: Run,
    encoded_input: bytes,
    context: ActivityContext,
) -> AttemptResult:
    """Run one attempt; never raises for the activity's own failures."""
    rt.metrics.activity_attempts += 1
    arg = decode(encoded_input)
    try:
        value = _call(activity, arg, cmd.timeout, context)
    except Exception as exc:
        names = [cls.__name__ for cls in type(exc).__mro__]
        return AttemptResult(
            ok=False,
            error_type=type(exc).__name__,
            message=cut_message(str(exc)),
            retryable=cmd.retry.is_retryable(names, exc),
        )
    if context.async_token is not None:
        return AttemptResult(ok=True)
    try:
        data = rt.encode_payload(value, f"result of activity {cmd.activity!r}")
    except (CodecError, PayloadTooLargeError) as exc:
        return AttemptResult(
            ok=False, error_type=exc.code, message=cut_message(str(exc)), retryable=False
        )
    return AttemptResult(ok=True, value=data)


def _call(
    activity: ActivityDefinition, arg: Any, timeout: float | None, context: ActivityContext
) -> Any:
    args = (arg,) if activity.takes_input else ()
    if timeout is not None and not activity.is_async:
        return _call_in_thread(activity, args, timeout, context)
    set_current(context)
    try:
        if activity.is_async:
            import asyncio  # only async activities pay for it

            return asyncio.run(_with_timeout(activity, args, timeout))
        return activity.fn(*args)
    finally:
        set_current(None)


async def _with_timeout(
    activity: ActivityDefinition, args: tuple[Any, ...], timeout: float | None
) -> Any:
    if timeout is None:
        return await activity.fn(*args)
    import asyncio

    try:
        return await asyncio.wait_for(activity.fn(*args), timeout)
    except TimeoutError:
        raise ActivityTimeoutError(
            f"activity {activity.name!r} attempt exceeded its timeout of {timeout}s"
        ) from None


def _call_in_thread(
    activity: ActivityDefinition, args: tuple[Any, ...], timeout: float, context: ActivityContext
) -> Any:
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        set_current(context)
        try:
            outcome["value"] = activity.fn(*args)
        except BaseException as exc:  # handed back to the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name=f"weft-activity-{activity.name}", daemon=True)
    worker.start()
    if not done.wait(timeout):
        raise ActivityTimeoutError(
            f"activity {activity.name!r} attempt exceeded its timeout of {timeout}s"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
