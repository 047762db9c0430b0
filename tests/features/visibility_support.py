"""Shared workflows and checks of the visibility suite (search attributes, tags, lists)."""

from __future__ import annotations

import datetime
from collections.abc import Generator
from typing import Any

from weft_serverless import ChildWorkflowFailedError, WorkflowContext, workflow
from weft_serverless.engine.persistence import index_entries as visibility
from weft_serverless.engine.persistence.records import STATUSES, WorkflowState
from weft_serverless.storage import keys
from weft_serverless.storage.base import Key, Storage

ATTRIBUTES = {
    "customer": str,
    "amount": float,
    "region": str,
    "priority": int,
    "rush": bool,
    "due": datetime.datetime,
}


def _order(ctx: WorkflowContext, new_amount: float | None) -> Generator[Any, Any, str]:
    if new_amount is not None:
        yield ctx.upsert_search_attributes({"amount": new_amount})
    yield ctx.wait_for_signal("ship")
    return "shipped"


def _bad_upsert(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, None]:
    yield ctx.upsert_search_attributes({"amount": "lots"})


def _plain(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, int]:
    yield ctx.wait_for_signal("go")
    return 1


def _parent(ctx: WorkflowContext, amount: Any) -> Generator[Any, Any, str]:
    try:
        yield ctx.start_child(
            "order",
            None,
            id="child",
            parent_close_policy="abandon",
            search_attributes={"customer": "from-parent", "amount": amount},
            tags=["child"],
        )
    except ChildWorkflowFailedError as exc:
        return exc.status
    return "started"


WORKFLOWS = {
    "parent": workflow("parent").execute(_parent),
    "order": workflow("order", search_attributes=ATTRIBUTES).execute(_order),
    "bad-upsert": workflow("bad-upsert", search_attributes=ATTRIBUTES).execute(_bad_upsert),
    "plain": workflow("plain").execute(_plain),
}


def index_items(storage: Storage, workflow_id: str) -> dict[Key, bytes]:
    """Every visibility index item naming ``workflow_id``, read from the store."""
    suffix = "#" + keys.enc(workflow_id)
    partitions = [
        keys.status_partition(status, shard)
        for status in STATUSES
        for shard in range(keys.STATUS_SHARDS)
    ]
    for shard in range(keys.VISIBILITY_SHARDS):
        partitions.append(keys.tag_partition(shard))
        partitions += [keys.attribute_partition(name, shard) for name in ATTRIBUTES]
    return {
        Key(partition, sort): value
        for partition in partitions
        for sort, value in storage.scan(partition)
        if sort.endswith(suffix)
    }


def assert_index_matches_state(storage: Storage, workflow_id: str) -> WorkflowState | None:
    """The index holds exactly the items the stored state implies (none for no state)."""
    data = storage.get(keys.state_key(workflow_id))
    state = None if data is None else WorkflowState.from_bytes(data)
    expected = {} if state is None else visibility.entries(keys.DEFAULT_SHARDS, state)
    assert index_items(storage, workflow_id) == expected
    return state
