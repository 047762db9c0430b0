"""Keys inside one workflow's partition ``wf#{id}``: state, op log, pending facts, attempts,
signals, child results, owner records: everything resuming reads in one range read."""

from __future__ import annotations

import functools

from weft_serverless.storage.base import Key
from weft_serverless.storage.keys.encoding import counter, counter_value, enc

STATE = "state"
RESULT = "result"
OP_PREFIX = "op#"
BLOB_PREFIX = "blob#"
PENDING_PREFIX = "pend#"
ATTEMPT_PREFIX = "att#"
SIGNAL_PREFIX = "sig#"
SIGNAL_ID_PREFIX = "sigid#"
CHILD_PREFIX = "child#"
UPDATE_APPLIED_PREFIX = "upa#"
UPDATE_RESPONSE_PREFIX = "upr#"
VERSION_PREFIX = "ver#"
ASYNC_RESULT_PREFIX = "asyncres#"
ACTIVITY_STARTED_PREFIX = "actrec#"
HEARTBEAT_PREFIX = "hb#"
RETRY_PREFIX = "retry#"
OWNER_EPOCH = "owner#epoch"
OWNER_HOLDER = "owner#holder"
OWNER_HEAD = "owner#head"
WAKE = "wake"


# -- workflow partition ----------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def workflow_partition(workflow_id: str) -> str:
    """Memoised: every step builds its run's keys from it (twice), and the cache answers
    without a Python call."""
    return "wf#" + enc(workflow_id)


def state_key(workflow_id: str) -> Key:
    return Key(workflow_partition(workflow_id), STATE)


def result_key(workflow_id: str) -> Key:
    """A finished run's result, when it does not fit in the state record beside its input."""
    return Key(workflow_partition(workflow_id), RESULT)


def step_slot(step: int) -> str:
    if 0 <= step < 100_000_000:  # every step of a run but its 100 millionth: counter's digits
        return str(step).zfill(8)
    return counter(step, 8)


def branch_slot(parent: str, index: int) -> str:
    return f"{parent}.{counter(index, 3)}"


def top_slot(ref: str) -> str:
    """The top-level step slot a slotted record belongs to: a branch (``00000003.001``) and
    an async attempt's pending record (``00000003@2``) belong to step ``00000003``."""
    return ref.split(".", 1)[0].split("@", 1)[0]


def describe_slot(slot: str) -> str:
    """A slot for people: ``00000003.001`` -> ``4 (branch 2)`` (both counted from 1)."""
    top, *branches = slot.split(".")
    text = str(counter_value(top) + 1)
    for branch in branches:
        text += f" (branch {counter_value(branch) + 1})"
    return text


def op_key(workflow_id: str, slot: str) -> Key:
    return Key(workflow_partition(workflow_id), OP_PREFIX + slot)


def blob_key(workflow_id: str, slot: str, digest: str) -> Key:
    """A large op record of a run with a head, by its digest: the op record names it."""
    return Key(workflow_partition(workflow_id), f"{BLOB_PREFIX}{slot}#{digest}")


def pending_key(workflow_id: str, slot: str) -> Key:
    return Key(workflow_partition(workflow_id), PENDING_PREFIX + slot)


def attempt_ref(slot: str, attempt: int) -> str:
    """``{slot}#{attempt}``: names one attempt of a step inside the sort keys below."""
    return f"{slot}#{counter(attempt, 4)}"


def attempt_key(workflow_id: str, slot: str, attempt: int) -> Key:
    return Key(workflow_partition(workflow_id), ATTEMPT_PREFIX + attempt_ref(slot, attempt))


def signal_prefix(name: str) -> str:
    return f"{SIGNAL_PREFIX}{enc(name)}#"


def signal_key(workflow_id: str, name: str, seq: str) -> Key:
    return Key(workflow_partition(workflow_id), signal_prefix(name) + seq)


def signal_id_key(workflow_id: str, signal_id: str) -> Key:
    return Key(workflow_partition(workflow_id), SIGNAL_ID_PREFIX + enc(signal_id))


def child_result_key(workflow_id: str, slot: str) -> Key:
    return Key(workflow_partition(workflow_id), CHILD_PREFIX + slot)


def update_applied_key(workflow_id: str, slot: str, seq: int) -> Key:
    """An update applied while the workflow was parked at top-level step ``slot``."""
    return Key(workflow_partition(workflow_id), f"{UPDATE_APPLIED_PREFIX}{slot}#{counter(seq, 4)}")


def update_response_key(workflow_id: str, update_id: str) -> Key:
    return Key(workflow_partition(workflow_id), UPDATE_RESPONSE_PREFIX + enc(update_id))


def version_key(workflow_id: str, change_id: str) -> Key:
    return Key(workflow_partition(workflow_id), VERSION_PREFIX + enc(change_id))


def async_result_key(workflow_id: str, slot: str, attempt: int) -> Key:
    return Key(workflow_partition(workflow_id), ASYNC_RESULT_PREFIX + attempt_ref(slot, attempt))


def activity_started_key(workflow_id: str, slot: str, attempt: int) -> Key:
    return Key(
        workflow_partition(workflow_id), ACTIVITY_STARTED_PREFIX + attempt_ref(slot, attempt)
    )


def heartbeat_key(workflow_id: str, slot: str) -> Key:
    """The latest heartbeat of the step at ``slot`` (one record a step, overwritten)."""
    return Key(workflow_partition(workflow_id), HEARTBEAT_PREFIX + slot)


def retry_key(workflow_id: str, slot: str, retry: int) -> Key:
    """The run's ``retry``-th retry, at the step it ran again: what it set aside of the
    failure it retried (engine/persistence/retry_history.py)."""
    return Key(workflow_partition(workflow_id), f"{RETRY_PREFIX}{slot}#{counter(retry, 4)}")


def owner_epoch_key(workflow_id: str) -> Key:
    return Key(workflow_partition(workflow_id), OWNER_EPOCH)


def owner_holder_key(workflow_id: str) -> Key:
    return Key(workflow_partition(workflow_id), OWNER_HOLDER)


def owner_head_key(workflow_id: str) -> Key:
    """The run's head under workflow-lease: its epoch and newest step (ADR 0037)."""
    return Key(workflow_partition(workflow_id), OWNER_HEAD)


def wake_key(workflow_id: str) -> Key:
    """Points at the wake-up timer of a run that may be driven but has not parked yet."""
    return Key(workflow_partition(workflow_id), WAKE)
