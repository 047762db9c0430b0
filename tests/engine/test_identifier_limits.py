"""Identifiers: whatever passes the check at the call can never fail later in storage.

A run is started, updated, signalled (twice, with one ``signal_id``) and pins a ``get_version``
change id, every identifier drawn up to its UTF-8 byte limit from text that percent-encoding
expands most (``%``, accented letters, emoji): on every backend, DynamoDB's 1,024-byte sort
key included. Identifiers over a limit, or holding a lone surrogate, are refused at the call
with ``InvalidArgumentError`` naming the field, and nothing is written.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from engine_helpers import Opener, workflow_keys
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft_serverless import InvalidArgumentError, WorkflowBuilderError, workflow
from weft_serverless.identifiers import (
    MAX_DEDUP_ID_BYTES,
    MAX_NAME_BYTES,
    MAX_WORKFLOW_ID_BYTES,
    is_printable,
)
from weft_serverless.testing import CrashingStorage, TestEngine

EXPANDING = ["%", "#", "/", "é", "€", "😀", "a", " "]
chars = st.sampled_from(EXPANDING) | st.characters(exclude_categories=("Cs",))


def fitted(limit: int, printable: bool = False) -> st.SearchStrategy[str]:
    """Text cut to at most ``limit`` UTF-8 bytes: mostly right at the limit."""

    def cut(text: str) -> str:
        if printable:
            text = "".join(c for c in text if is_printable(c))
        while len(text.encode()) > limit:
            text = text[:-1]
        return text

    return st.text(chars, min_size=1, max_size=limit + 8).map(cut).filter(bool)


def _keyed(ctx: Any, names: dict[str, str]) -> Any:
    ctx.on_update(names["update"], lambda payload: payload)
    version = yield ctx.get_version(names["change"], 1, 2)
    got = yield ctx.wait_for_signal(names["signal"])
    return [version, got]


WORKFLOWS = {"keyed": workflow("keyed").execute(_keyed)}
SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)


_unique = itertools.count()
PREFIX_BYTES = 8


def _unique_prefix() -> str:
    """Examples share one store: an ASCII prefix keeps ids and idempotency keys apart."""
    return f"{next(_unique):07d}~"


@settings(SETTINGS, max_examples=20)
@given(
    workflow_id=fitted(MAX_WORKFLOW_ID_BYTES - PREFIX_BYTES, printable=True),
    idempotency_key=fitted(MAX_WORKFLOW_ID_BYTES - PREFIX_BYTES),
    signal=fitted(MAX_NAME_BYTES),
    signal_id=fitted(MAX_DEDUP_ID_BYTES),
    update=fitted(MAX_NAME_BYTES),
    update_id=fitted(MAX_DEDUP_ID_BYTES),
    change=fitted(MAX_NAME_BYTES),
)
def test_an_accepted_identifier_never_fails_later_in_storage(
    storage_factory: Opener,
    workflow_id: str,
    idempotency_key: str,
    signal: str,
    signal_id: str,
    update: str,
    update_id: str,
    change: str,
) -> None:
    workflow_id, idempotency_key = (
        _unique_prefix() + workflow_id,
        _unique_prefix() + idempotency_key,
    )
    te = TestEngine(WORKFLOWS, storage=storage_factory())
    names = {"signal": signal, "update": update, "change": change}
    handle = te.start("keyed", names, id=workflow_id, idempotency_key=idempotency_key)
    assert te.start("keyed", names, idempotency_key=idempotency_key).id == workflow_id
    assert te.engine.update(workflow_id, update, "u", update_id=update_id) == "u"
    assert te.engine.update(workflow_id, update, "again", update_id=update_id) == "u"
    te.signal(workflow_id, signal, "go", signal_id=signal_id)
    te.signal(workflow_id, signal, "go", signal_id=signal_id)
    assert handle.result() == [2, "go"]


def around(limit: int) -> st.SearchStrategy[str]:
    """Text from well under to about twice ``limit`` UTF-8 bytes."""
    return st.text(chars, min_size=1, max_size=limit // 2 + 8)


def _fits(value: str, limit: int) -> bool:
    return len(value.encode()) <= limit


@settings(SETTINGS, max_examples=15)
@given(
    workflow_id=around(MAX_WORKFLOW_ID_BYTES),
    idempotency_key=around(MAX_WORKFLOW_ID_BYTES),
    signal=around(MAX_NAME_BYTES),
    signal_id=around(MAX_DEDUP_ID_BYTES),
    update=around(MAX_NAME_BYTES),
    update_id=around(MAX_DEDUP_ID_BYTES),
    change=around(MAX_NAME_BYTES),
)
def test_any_identifier_is_refused_at_its_call_or_never_fails_later(
    storage_factory: Opener,
    workflow_id: str,
    idempotency_key: str,
    signal: str,
    signal_id: str,
    update: str,
    update_id: str,
    change: str,
) -> None:
    """Each call either refuses an identifier over its limit (InvalidArgumentError naming it,
    nothing written) or accepts it, and then the run finishes: it never stays running."""
    workflow_id, idempotency_key = (
        _unique_prefix() + workflow_id,
        _unique_prefix() + idempotency_key,
    )
    store = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=store)
    names = {"signal": signal, "update": update, "change": change}
    bad_start = {
        field
        for field, ok in [
            ("id", _fits(workflow_id, MAX_WORKFLOW_ID_BYTES) and is_printable(workflow_id)),
            ("idempotency_key", _fits(idempotency_key, MAX_WORKFLOW_ID_BYTES)),
        ]
        if not ok
    }
    if bad_start:
        with pytest.raises(InvalidArgumentError) as info:
            te.start("keyed", names, id=workflow_id, idempotency_key=idempotency_key)
        assert info.value.field in bad_start
        assert store.writes == 0
        return
    handle = te.start("keyed", names, id=workflow_id, idempotency_key=idempotency_key)
    if not all(_fits(name, MAX_NAME_BYTES) for name in names.values()):
        # Refused in workflow code, at the line that passed it: the run fails with the reason.
        assert te.describe(workflow_id).status == "failed"
        assert (te.describe(workflow_id).error or {}).get("type") == "InvalidArgumentError"
        return
    before = store.writes
    if _fits(update_id, MAX_DEDUP_ID_BYTES):
        assert te.engine.update(workflow_id, update, "u", update_id=update_id) == "u"
    else:
        with pytest.raises(InvalidArgumentError) as info:
            te.engine.update(workflow_id, update, "u", update_id=update_id)
        assert (info.value.field, store.writes) == ("update_id", before)
    before = store.writes
    if _fits(signal_id, MAX_DEDUP_ID_BYTES):
        te.signal(workflow_id, signal, "go", signal_id=signal_id)
    else:
        with pytest.raises(InvalidArgumentError) as info:
            te.signal(workflow_id, signal, "go", signal_id=signal_id)
        assert (info.value.field, store.writes) == ("signal_id", before)
        te.signal(workflow_id, signal, "go")
    assert handle.result() == [2, "go"]


TOO_LONG = {
    "id": MAX_WORKFLOW_ID_BYTES,
    "idempotency_key": MAX_WORKFLOW_ID_BYTES,
    "name": MAX_NAME_BYTES,
    "signal_id": MAX_DEDUP_ID_BYTES,
    "update_id": MAX_DEDUP_ID_BYTES,
}


def _call(te: TestEngine, field: str, value: str) -> None:
    if field in ("id", "idempotency_key"):
        te.start("keyed", {}, **{field: value})
    elif field == "signal_id":
        te.signal("w", "go", signal_id=value)
    elif field == "update_id":
        te.engine.update("w", "u", 1, update_id=value)
    else:
        te.signal("w", value)


@SETTINGS
@given(
    field=st.sampled_from(sorted(TOO_LONG)),
    data=st.data(),
)
def test_an_identifier_over_its_byte_limit_or_with_a_surrogate_is_refused_at_the_call(
    storage_factory: Opener, field: str, data: st.DataObject
) -> None:
    limit = TOO_LONG[field]
    value = data.draw(
        st.text(chars, min_size=1, max_size=limit).filter(lambda s: len(s.encode()) > limit)
        | st.text(chars, max_size=8).map(lambda s: s + "\ud800")
    )
    store = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=store)
    before = store.writes
    with pytest.raises(InvalidArgumentError) as info:
        _call(te, field, value)
    assert info.value.field == field
    assert store.writes == before


@pytest.mark.parametrize(
    ("body", "workflow_id", "field"),
    [
        (lambda ctx: ctx.wait_for_signal("😀" * 65), "w", "signal name"),
        (lambda ctx: ctx.get_version("x" * 2_000, 1, 2), "w", "change_id"),
        (lambda ctx: ctx.start_child("w", id="é" * 129), "w", "child id"),
        (lambda ctx: ctx.start_child("w"), "é" * 128, "child id"),
        (lambda ctx: ctx.wait_for_signal("bad\ud800"), "w", "signal name"),
        (lambda ctx: ctx.start_child("w\ud800"), "w", "workflow_type"),
    ],
    ids=[
        "emoji-signal-name",
        "long-change-id",
        "long-child-id",
        "derived-child-id",
        "surrogate-signal-name",
        "surrogate-child-type",
    ],
)
def test_a_bad_identifier_in_workflow_code_fails_the_run_at_that_line(
    storage_factory: Opener, body: Any, workflow_id: str, field: str
) -> None:
    """The run fails with InvalidArgumentError naming the field; the bad key is never written."""

    def wf(ctx: Any, _: Any) -> Any:
        yield ctx.now()
        return (yield body(ctx))

    te = TestEngine({"w": workflow("w").execute(wf)}, storage=storage_factory())
    description = te.start("w", id=workflow_id).describe()
    assert description.status == "failed"
    assert description.error is not None
    assert "InvalidArgumentError" in str(description.error)
    assert field in str(description.error)
    assert [sort for sort in workflow_keys(te.storage, workflow_id) if "%" in sort] == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda te: te.signal("w", "go\ud800"), "name"),
        (lambda te: te.signal("w", "go", signal_id="id\udfff"), "signal_id"),
        (lambda te: te.engine.update("w", "u\ud800", 1), "name"),
        (lambda te: te.engine.update("w", "u", 1, update_id="\ud800"), "update_id"),
        (lambda te: te.start("keyed", {}, id="x\ud800"), "id"),
        (lambda te: te.start("keyed", {}, idempotency_key="\udc00"), "idempotency_key"),
    ],
    ids=["signal-name", "signal-id", "update-name", "update-id", "workflow-id", "idem-key"],
)
def test_a_lone_surrogate_in_an_identifier_is_an_invalid_argument_with_nothing_written(
    storage_factory: Opener, call: Any, field: str
) -> None:
    """Never a UnicodeEncodeError from deep inside key encoding."""
    store = CrashingStorage(storage_factory())
    te = TestEngine(WORKFLOWS, storage=store)
    with pytest.raises(InvalidArgumentError) as info:
        call(te)
    assert info.value.field == field
    assert "lone surrogate" in str(info.value)
    assert store.writes == 0


def test_a_lone_surrogate_in_a_workflow_or_activity_name_is_refused_by_the_builder() -> None:
    """Names land in stored records; the builder reports them with its other issues."""
    with pytest.raises(WorkflowBuilderError) as info:
        workflow("w\ud800", version="1\udc00").activities(**{"a\ud800": len}).execute(_keyed)
    assert len(info.value.issues) == 3
    assert all("lone surrogate" in issue for issue in info.value.issues)
