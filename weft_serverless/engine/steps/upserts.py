"""The ``upsert_search_attributes`` step: the run's new attribute values, its state and its
index items committed with the step's op record, in one batch (ADR 0030).

Replaying the step changes nothing: the state already holds the values. The batch is
conditional on the state read by this drive, so an operator's move in between (a cancel)
makes the commit lose and the drive start over rather than overwrite it.
"""

from __future__ import annotations

import dataclasses

from weft_serverless.codec import encode
from weft_serverless.commands import UpsertSearchAttributes
from weft_serverless.engine.persistence import index_entries
from weft_serverless.engine.persistence.outcomes import Done, Outcome, RaiseAtYield
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.steps.scope import StepScope
from weft_serverless.errors import SearchAttributeError
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Put


def upsert(scope: StepScope, cmd: UpsertSearchAttributes, slot: str) -> Done:
    history = scope.history
    state = history.state
    attributes = {**index_entries.attributes_of(state), **cmd.values}
    extra = index_entries.with_visibility(state.extra, attributes, index_entries.tags_of(state))
    new = dataclasses.replace(state, extra=extra, updated_at=scope.rt.now())
    try:
        index_entries.check_fits(new)
    except SearchAttributeError as exc:
        raise RaiseAtYield(exc) from None
    new_bytes = new.to_bytes()
    key = keys.state_key(state.id)

    def committed() -> None:
        history.state, history.state_bytes = new, new_bytes

    return Done(
        Outcome(None),
        OpRecord.holding(encode(None)),
        conditions=[Condition(key, history.state_bytes)],
        ops=[Put(key, new_bytes), *index_entries.index_ops(scope.rt.shard_layout, state, new)],
        after_commit=[committed],
    )
