"""One serverless invocation's scope: a time budget, claim heartbeats, release at the end.

Lambda freezes a container between invocations, so nothing may be held across them: the
scope renews claims while an activity runs and releases parked workflows' claims on exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from weft_serverless.engine.background import Heartbeat
from weft_serverless.engine.runtime import Runtime


@contextmanager
def invocation_scope(
    rt: Runtime,
    time_left: Callable[[], float] | None,
    deadline: float | None,
    step_reserve: float,
    heartbeat: bool,
) -> Iterator[None]:
    if time_left is None and deadline is not None:
        fixed = deadline

        def time_left() -> float:
            return fixed - time.monotonic()

    beat = Heartbeat(rt) if heartbeat and rt.fence.renew_interval else None
    dying = False
    try:
        with rt.invocation.within(time_left, step_reserve):
            if beat is not None:
                beat.start()
            yield
    except BaseException as exc:
        # A process that is dying (SystemExit, KeyboardInterrupt, a simulated crash)
        # releases nothing: its claims expire and are taken over, as after a real crash.
        dying = not isinstance(exc, Exception)
        raise
    finally:
        if beat is not None:
            beat.stop()
        if not dying:
            released = rt.fence.release_parked()
            rt.metrics.incr("claims_released_at_invocation_end", released)
