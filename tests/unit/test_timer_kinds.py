"""The timer kind table: names and tags are persisted, so each must stay what it was."""

from __future__ import annotations

from weft_serverless.codec import decode
from weft_serverless.engine.persistence import timers
from weft_serverless.storage import keys

# Stored name and tag of every kind, as records written by earlier versions spell them.
PERSISTED = {
    "close-children": "close-children",
    "retention": "retention",
    "deadline": "deadline",
    "delayed-start": "delayed-start",
    "wake": "wake",
    "sleep": "s",
    "timeout": "w",
    "wait-condition": "u",
    "retry": "r",
    "budget": "b",
    "child": "c",
    "signal": "g",
    "async-activity": "a",
    "resume": None,
    "schedule": "schedule",
    "concurrency-admit": "q",
    "teardown": "teardown",
    "bulk": "bulk",
}


def test_every_kind_keeps_its_stored_name_and_tag() -> None:
    assert {kind.name: kind.tag for kind in timers.KINDS} == PERSISTED


def test_step_and_event_tags_are_single_distinct_letters() -> None:
    letters = [kind.tag for kind in timers.KINDS if kind.scope != "run" and kind.tag]
    assert all(len(tag) == 1 for tag in letters)
    assert len(set(letters)) == len(letters)
    assert timers.kind_of_tag("s3.1") is timers.SLEEP
    assert timers.kind_of_tag("deadline") is None


def test_arm_writes_the_key_and_value_earlier_versions_wrote() -> None:
    put = timers.arm(keys.DEFAULT_SHARDS, timers.CHILD, "wf", 12.5, "00000002")
    assert put.key == keys.timer_key(keys.DEFAULT_SHARDS, 12.5, "wf", "c00000002")
    assert decode(put.value) == {"wf": "wf", "kind": "child"}
    assert timers.arm(keys.DEFAULT_SHARDS, timers.DEADLINE, "wf", 3.0).key == keys.timer_key(
        keys.DEFAULT_SHARDS, 3.0, "wf", "deadline"
    )


def test_firing_order_is_table_order_with_unknown_kinds_last() -> None:
    order = timers.firing_order({"wake", "mystery", "deadline", "close-children"})
    assert order == [timers.CLOSE_CHILDREN, timers.DEADLINE, timers.WAKE, "mystery"]
