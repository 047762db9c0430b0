"""Running a terminal run's teardown: its finalizers, in reverse registration order.

The teardown record (written by the terminal batch, ``finalizers.arm_teardown``) lists the
finalizers left. One engine runs them at a time: it first claims the teardown, one batch
that rewrites the record with itself as holder and a new claim epoch (on the bytes it read)
plus the ownership mode's claim (under workflow-lease a holder with a new owner epoch, as
resume takes; under lease the store lease condition). Each finalizer then runs at least
once (``steps.attempt.run_attempt``) and its outcome is committed before the next one
starts, conditioned on the record bytes this engine last wrote and fenced by ``commit``:
an engine whose claim was taken over lands nothing and stops, and a crash re-runs only
the finalizers not yet recorded done.

A failed attempt with retries left records the failure, re-arms the teardown timer at the
backoff and releases the claim; one that exhausts its retries writes a dead letter outside
the run's partition (purge keeps it) and the teardown goes on with the next finalizer.
A claim whose holder died is taken over once ``CLAIM_TTL`` has passed since it was taken
(under workflow-lease, also once the run's owner claim is open to takeover).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from weft_serverless.activity import ActivityContext
from weft_serverless.codec import decode, decode_record, encode
from weft_serverless.commands import Run
from weft_serverless.engine.ownership import EngineDeposedError
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.runs import event_log, outbox
from weft_serverless.engine.runs.commit import LostCommit, commit, write_claiming
from weft_serverless.engine.runs.finalizers import COMPLETED, DEAD, DONE, PENDING, RUNNING
from weft_serverless.engine.runtime import Runtime, logger
from weft_serverless.engine.steps.attempt import AttemptResult, run_attempt
from weft_serverless.finalizer import Finalizer
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Delete, Key, Op, Put
from weft_serverless.workflow import WorkflowDefinition

CLAIM_TTL = 60.0
"""Seconds a teardown claim keeps other engines out: one whose engine died is taken over
after it (under workflow-lease, the run's owner claim must be open to takeover too)."""

Outcome = Literal["none", "completed", "later", "retain", "deposed"]


GIVEN_UP_RETRY = 1.0
"""Seconds before a finalizer attempt given up at an invocation's end runs again."""


def run(rt: Runtime, workflow_id: str) -> Outcome:
    """Run what is due of the run's teardown here; how it ended.

    ``none``: no teardown. ``completed``: every finalizer ran or was dead-lettered.
    ``later``: waiting for a backoff (its timer is armed). ``retain``: another engine
    holds it, this one cannot run the workflow's type, or the serverless invocation is
    nearly over (its due timer stays for the next pass). ``deposed``: this engine's claim
    was taken over while it ran a finalizer; nothing more was written.
    """
    key = keys.teardown_key(workflow_id)
    current = rt.storage.get(key)
    if current is None:
        return "none"
    record = decode_record(current, f"the teardown of workflow {workflow_id!r}")
    if record["status"] == COMPLETED:
        return "completed"
    now = rt.now()
    if not keys.is_due(now, record["due"]):
        return "later"
    definition = rt.definitions.get(record["type"])
    if definition is None or _held(rt, workflow_id, record, now):
        return "retain"
    claimed = {
        **record,
        "status": RUNNING,
        "holder": rt.engine_id,
        "until": now + CLAIM_TTL,
        "epoch": record["epoch"] + 1,
    }
    data = encode(claimed)
    fragment = rt.fence.resume_fragment(workflow_id)
    conditions = [Condition(key, current), *fragment.conditions]
    if not write_claiming(rt, workflow_id, conditions, [Put(key, data), *fragment.ops]):
        return "retain"
    try:
        return _Teardown(rt, workflow_id, definition, claimed, data).run()
    except (LostCommit, EngineDeposedError):
        rt.fence.deposed(workflow_id)
        rt.metrics.incr("teardowns_deposed")
        logger.warning("teardown of %s taken over by another engine; stopped", workflow_id)
        return "deposed"


def _held(rt: Runtime, workflow_id: str, record: dict[str, Any], now: float) -> bool:
    """Whether another claim on this teardown may still be live."""
    if record.get("holder") is not None and now < record.get("until", 0.0):
        return True
    return rt.fence.held_elsewhere(workflow_id)


class _Teardown:
    """One engine's run through a claimed teardown."""

    def __init__(
        self,
        rt: Runtime,
        workflow_id: str,
        definition: WorkflowDefinition,
        record: dict[str, Any],
        data: bytes,
    ) -> None:
        self.rt, self.workflow_id, self.definition = rt, workflow_id, definition
        self.record, self.data = record, data
        self.key = keys.teardown_key(workflow_id)

    def run(self) -> Outcome:
        for item in self.record["items"]:
            while item["state"] == PENDING:  # a retry due at once runs on here
                if self.rt.low_on_time(None):
                    # Too little of the invocation left to start one: let the claim go; the
                    # due timer stays, for the next invocation's maintenance pass.
                    self._write(PENDING, None, release=True)
                    return "retain"
                later = self._one(item)
                if later is not None:
                    return later
        self._write(COMPLETED, None, release=True, also=self._retention())
        self.rt.metrics.incr("teardowns_completed")
        return "completed"

    def _retention(self) -> list[Op]:
        """The retention timer of the run's end, again: a purge due meanwhile waited for
        the teardown (``retention.purge``) and left it to this write."""
        window = self.rt.retention.get(self.record["reason"])
        if window is None:
            return []
        due = max(self.rt.now(), self.record["at"] + window)
        return [timers.arm(self.rt.shards, timers.RETENTION, self.workflow_id, due)]

    def _one(self, item: dict[str, Any]) -> Outcome | None:
        """Run one finalizer's next attempt and commit its outcome; ``later`` when it waits
        for a retry."""
        rt, record = self.rt, self.record
        stored = rt.storage.get(keys.finalizer_key(self.workflow_id, record["first"], item["n"]))
        assert stored is not None, "a teardown's finalizer records stay until it completes"
        finalizer = Finalizer.from_record(decode_record(stored, "a finalizer record"))
        number = item["attempts"] + 1
        rt.fence.before_activity(self.workflow_id)
        activity = rt.activity(self.definition, finalizer.activity)
        context = ActivityContext(
            self.workflow_id, finalizer.activity, number, f"teardown#{item['n']}"
        )
        context.provide_services = rt.services.provider(finalizer.activity, activity.services)
        cmd = Run(finalizer.activity, None, finalizer.retry)
        result = run_attempt(rt, activity, cmd, finalizer.input, context)
        if not isinstance(result, AttemptResult):
            # Given up before it ended (the invocation ran out of time): not an attempt
            # spent; the next pass runs it again.
            self._write(PENDING, rt.now() + GIVEN_UP_RETRY, release=True)
            return "later"
        item["attempts"] = number
        rt.metrics.incr("finalizer_attempts")
        if result.ok:
            item["state"], item["error"] = DONE, None
            self._write(RUNNING, None)
            return None
        item["error"] = {"type": result.error_type, "message": result.message}
        if result.retryable and number < finalizer.retry.max_attempts:
            due = rt.now() + finalizer.retry.backoff(number)
            if keys.is_due(rt.now(), due):
                # No backoff: retry now. (A timer re-armed at this millisecond could be the
                # very timer being fired, which the pass deletes once the handler returns.)
                self._write(RUNNING, None)
                return None
            self._write(PENDING, due, release=True)
            return "later"
        item["state"] = DEAD
        letter = self._dead_letter(item, finalizer)
        self._write(RUNNING, None, also=[letter, *self._dead_letter_event(letter, item)])
        rt.metrics.incr("finalizers_dead_lettered")
        logger.warning(
            "workflow %s: finalizer %r dead-lettered after %d attempts: %s: %s",
            self.workflow_id,
            finalizer.activity,
            number,
            result.error_type,
            result.message,
        )
        return None

    def _dead_letter(self, item: dict[str, Any], finalizer: Finalizer) -> Op:
        record = self.record
        key = keys.dead_letter_key(self.workflow_id, record["created"], record["first"], item["n"])
        letter = {
            "workflow_id": self.workflow_id,
            "workflow_type": record["type"],
            "reason": record["reason"],
            "activity": finalizer.activity,
            "position": item["n"] + 1,
            "attempts": item["attempts"],
            "error": item["error"],
            "input": finalizer.input,
            "at": self.rt.now(),
        }
        return Put(key, encode(letter))

    def _dead_letter_event(self, letter: Op, item: dict[str, Any]) -> list[Op]:
        """The outbox item reporting the dead letter (none without an event sink)."""
        assert isinstance(letter, Put)
        record = self.record
        event = event_log.dead_letter_event(
            record["type"], record["created"], item["n"], decode(letter.value)
        )
        return outbox.item(self.rt, event)

    def _write(
        self, status: str, due: float | None, *, release: bool = False, also: Sequence[Op] = ()
    ) -> None:
        """Commit the record's progress on the bytes this engine last wrote (fenced); with
        ``release`` the claim is let go, and ``due`` re-arms the teardown timer."""
        old_timer = self.record.get("timer")
        ops: list[Op] = list(also)
        timer_ref = old_timer  # kept while the teardown goes on: a crash leaves it to fire
        if due is not None:
            timer = timers.arm(self.rt.shards, timers.TEARDOWN, self.workflow_id, due)
            timer_ref = timers.timer_ref(timer.key)
            ops.append(timer)
        elif status == COMPLETED:
            timer_ref = None
        if old_timer and old_timer != timer_ref:
            ops.append(Delete(Key(*old_timer)))
        new = {**self.record, "status": status, "timer": timer_ref}
        if due is not None:
            new["due"] = due
        if release:
            new["holder"], new["until"] = None, 0.0
        data = encode(new)
        conditions = [Condition(self.key, self.data)]
        if release:
            with self.rt.fence.release_for_terminal(self.workflow_id) as fragment:
                commit(
                    self.rt,
                    self.workflow_id,
                    [*conditions, *fragment.conditions],
                    [Put(self.key, data), *ops, *fragment.ops],
                )
        else:
            commit(self.rt, self.workflow_id, conditions, [Put(self.key, data), *ops])
        self.record, self.data = new, data
