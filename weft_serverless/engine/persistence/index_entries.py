"""The visibility index of a run: its status entry, one item per search attribute value and
one per tag, all derived from its state and rewritten in the batch that changes them.

Every item holds what a list page shows and filters on (type, status, attributes, tags), so
a page needs no read of the runs' states. A run with no attributes and no tags writes the
status entry exactly as before this index existed (ADR 0030).
"""

from __future__ import annotations

from typing import Any

from weft_serverless.codec import decode, encode
from weft_serverless.engine.persistence.records import WorkflowState
from weft_serverless.errors import SearchAttributeError
from weft_serverless.search_attributes import value_token
from weft_serverless.storage import keys
from weft_serverless.storage.base import Delete, Key, Op, Put
from weft_serverless.storage.keys.shards import DEFAULT_SHARDS, ShardCounts, ShardLayout

ATTRIBUTES_FIELD = "sa"
TAGS_FIELD = "tags"


def attributes_of(state: WorkflowState) -> dict[str, Any]:
    return dict(state.extra.get(ATTRIBUTES_FIELD) or {})


def tags_of(state: WorkflowState) -> list[str]:
    return list(state.extra.get(TAGS_FIELD) or [])


def with_visibility(
    extra: dict[str, Any], attributes: dict[str, Any], tags: list[str]
) -> dict[str, Any]:
    """``extra`` with the run's attributes and tags (fields left out when empty)."""
    out = {k: v for k, v in extra.items() if k not in (ATTRIBUTES_FIELD, TAGS_FIELD)}
    if attributes:
        out[ATTRIBUTES_FIELD] = attributes
    if tags:
        out[TAGS_FIELD] = tags
    return out


def status_value(state: WorkflowState) -> bytes:
    """The status entry's value: the type, plus attributes and tags when the run has any."""
    value: dict[str, Any] = {"type": state.type}
    attributes, tags = attributes_of(state), tags_of(state)
    if attributes:
        value[ATTRIBUTES_FIELD] = attributes
    if tags:
        value[TAGS_FIELD] = tags
    return encode(value)


def entries(shards: ShardCounts, state: WorkflowState) -> dict[Key, bytes]:
    """Every index item of the run as it stands in ``state``, in a store of ``shards``."""
    out = {keys.status_key(shards, state.status, state.id, state.created_at): status_value(state)}
    attributes, tags = attributes_of(state), tags_of(state)
    if not attributes and not tags:
        return out
    item = encode(
        {
            "type": state.type,
            "status": state.status,
            ATTRIBUTES_FIELD: attributes,
            TAGS_FIELD: tags,
        }
    )
    for name, value in attributes.items():
        out[keys.attribute_key(shards, name, value_token(value), state.id, state.created_at)] = item
    for tag in tags:
        out[keys.tag_key(shards, tag, state.id, state.created_at)] = item
    return out


MAX_INDEX_SORT_BYTES = 1024
"""Every backend's sort key limit (DynamoDB's): an item's key holds the value and the id."""


def check_fits(state: WorkflowState) -> None:
    """Refuse, before any write, values whose index key (value, start time, id, each
    percent-encoded) would be over the sort key limit."""
    for key in entries(DEFAULT_SHARDS, state):  # a sort key is the same in every shard
        if len(key.sort) > MAX_INDEX_SORT_BYTES:
            raise SearchAttributeError(
                f"a search attribute value or tag of workflow {state.id!r} makes an index key "
                f"of {len(key.sort)} bytes, over {MAX_INDEX_SORT_BYTES} (non-ASCII characters "
                "count three times each, in the value and in the id); shorten the value",
                "search_attributes",
            )


def index_ops(
    layout: ShardLayout, before: WorkflowState | None, after: WorkflowState | None
) -> list[Op]:
    """The writes taking the index from ``before`` to ``after`` (None: no run): stale items
    deleted, new or changed ones put, unchanged ones left alone.

    While the store's counts change (ADR 0050) an item of ``before`` may sit under either
    layout: every key it may have that ``after`` does not keep is deleted, and an item put
    under the written counts whose other-layout key differs is put even when unchanged, with
    that other key deleted, so it is never left behind nor held twice. A run not started yet
    (``before`` None) has no item anywhere to delete."""
    written = layout.write
    old = entries(written, before) if before is not None else {}
    new = entries(written, after) if after is not None else {}
    stale: dict[Key, None] = dict.fromkeys(key for key in old if key not in new)
    moving: set[Key] = set()
    for other in layout.layouts[1:] if before is not None else ():
        twins = entries(other, after) if after is not None else {}
        moving.update(key for key in new if key not in twins)
        for key in (*_keys_of(other, before), *twins):
            if key not in new:
                stale[key] = None
    ops: list[Op] = [Delete(key) for key in stale]
    ops += [Put(key, value) for key, value in new.items() if old.get(key) != value or key in moving]
    return ops


def _keys_of(shards: ShardCounts, state: WorkflowState | None) -> list[Key]:
    return [] if state is None else list(entries(shards, state))


def decode_item(value: bytes) -> dict[str, Any]:
    """An index item's fields (a status entry lacks ``status``; older ones hold only type)."""
    item: dict[str, Any] = decode(value)
    return item
