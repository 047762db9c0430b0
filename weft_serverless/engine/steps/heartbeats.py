"""The engine's side of ``current_activity().heartbeat(details)``.

Every heartbeat resets the attempt's heartbeat timeout and, under workflow-lease, renews the
run's claim when it nears expiry. The details are stored (one ``hb#`` record a step,
overwritten) on the first heartbeat and then at most once per ``STORE_EVERY`` seconds, so a
chatty activity does not turn into a write per call; the newest details always reach the
next attempt, because a failed attempt's retry record carries them. Storing is also how an
attempt learns its run ended elsewhere: the write is fenced like any of the run's writes (a
cancel rotates the owner epoch under workflow-lease) and reads the run's status first.
"""

from __future__ import annotations

import time
from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.engine.ownership import EngineDeposedError
from weft_serverless.engine.persistence.records import RUNNING, History, WorkflowState
from weft_serverless.engine.persistence.stored_records import AttemptRecord
from weft_serverless.engine.runs.commit import LostCommit, commit
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.engine.steps.attempt import Attempt
from weft_serverless.errors import WeftError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Put

STORE_EVERY = 5.0
"""Seconds (engine or real time, whichever passes first) between stored heartbeats."""


class Heartbeats:
    """Receives one attempt's heartbeats (installed as its context's ``on_heartbeat``)."""

    def __init__(self, rt: Runtime, attempt: Attempt) -> None:
        self.rt, self.attempt = rt, attempt
        self.stored_at: float | None = None
        self.stored_real = 0.0

    def __call__(self, details: bytes) -> None:
        rt, context = self.rt, self.attempt.context
        now = rt.now()
        self.attempt.beaten(now)
        if context.cancelled:
            return
        try:
            rt.fence.before_activity(context.workflow_id)
            if self._store_due(now):
                self._store(now, details)
        except (EngineDeposedError, LostCommit):
            context.cancel_event.set()  # another engine owns the run now: its result is void
        except WeftError as exc:
            logger.warning(
                "workflow %s: heartbeat of %r not stored (the next one tries again): %s",
                context.workflow_id,
                context.activity,
                exc,
            )

    def _store_due(self, now: float) -> bool:
        if self.stored_at is None:
            return True
        return (
            now - self.stored_at >= STORE_EVERY
            or time.monotonic() - self.stored_real >= STORE_EVERY
        )

    def _store(self, now: float, details: bytes) -> None:
        rt, context = self.rt, self.attempt.context
        state = rt.storage.get(keys.state_key(context.workflow_id))
        if state is None or WorkflowState.from_bytes(state).status != RUNNING:
            context.cancel_event.set()
            return
        record = {"n": context.attempt, "at": now, "d": details}
        key = keys.heartbeat_key(context.workflow_id, context.slot)
        commit(rt, context.workflow_id, [], [Put(key, encode(record))])
        self.stored_at, self.stored_real = now, time.monotonic()
        rt.metrics.incr("heartbeats_stored")


def previous_details(history: History, slot: str, attempts: list[AttemptRecord]) -> Any:
    """The newest details an earlier attempt of ``slot`` heartbeat: from its retry record,
    or the stored heartbeat when a later attempt stored one before a crash cut it."""
    found: tuple[int, bytes] | None = None
    beat = attempts[-1].heartbeat if attempts else None
    if beat is not None:
        found = (attempts[-1].number, beat)
    stored = history.heartbeats.get(slot)
    if stored is not None and (found is None or int(stored["n"]) > found[0]):
        found = (int(stored["n"]), stored["d"])
    return None if found is None else decode(found[1])
