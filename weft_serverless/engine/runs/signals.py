"""Signal delivery: buffer durably, deduplicate by ``signal_id``, and leave a wake-up timer.

The timer lands in the same batch as the signal, so a crash right after delivery cannot
strand it: the next maintenance pass wakes the workflow even if no engine drove it.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from weft_serverless.codec import encode
from weft_serverless.engine.config import check_dedup_id, check_name
from weft_serverless.engine.persistence import timers
from weft_serverless.engine.persistence.records import TERMINAL, WorkflowState
from weft_serverless.engine.persistence.stored_records import SignalRecord
from weft_serverless.engine.runs.commit import write
from weft_serverless.engine.runtime import Runtime
from weft_serverless.errors import (
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Op, Put

_sequence = itertools.count()
_process_tag = uuid.uuid4().hex[:6]


def delivery_ops(
    rt: Runtime, workflow_id: str, name: str, payload: Any, signal_id: str | None
) -> list[Op]:
    """The writes that buffer one signal (checked and encoded before anything is written)."""
    check_name(name, "name")
    if signal_id is not None:
        check_dedup_id(signal_id, "signal_id")
    encoded = rt.encode_payload(payload, f"payload of signal {name!r}")
    now = rt.now()
    seq = f"{keys.ms(now):016d}.{keys.counter(next(_sequence), 8)}.{_process_tag}"
    timer = timers.timer_key(rt.shards, timers.SIGNAL, workflow_id, now, seq)
    record = SignalRecord(encoded, signal_id, now, timers.timer_ref(timer))
    ops: list[Op] = [
        Put(keys.signal_key(workflow_id, name, seq), record.to_bytes()),
        Put(timer, timers.timer_value(workflow_id, timers.SIGNAL)),
    ]
    if signal_id is not None:
        dedup = encode({"seq": seq, "name": name})
        ops.append(Put(keys.signal_id_key(workflow_id, signal_id), dedup))
    return ops


def deliver(rt: Runtime, workflow_id: str, name: str, payload: Any, signal_id: str | None) -> bool:
    """Buffer a signal for a workflow; returns False if ``signal_id`` was delivered before."""
    ops = delivery_ops(rt, workflow_id, name, payload, signal_id)
    if signal_id is not None and rt.storage.get(keys.signal_id_key(workflow_id, signal_id)):
        return False  # delivered before: a resend is a no-op, even once the run finished
    current = rt.storage.get(keys.state_key(workflow_id))
    if current is None:
        raise WorkflowNotFoundError(workflow_id)
    state = WorkflowState.from_bytes(current)
    if state.status in TERMINAL:
        raise WorkflowNotRunningError(workflow_id, state.status)
    conditions: list[Condition] = []
    if signal_id is not None:
        conditions.append(Condition(keys.signal_id_key(workflow_id, signal_id), None))
    return write(rt, conditions, ops)
