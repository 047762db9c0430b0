"""Update validators fail closed: only ``None`` and ``True`` accept.

Each rejection form (``False``, an issue list, a raised error, a Standard Schema failure
result, a pydantic-style ``ValidationError`` raised or returned) gives
``UpdateValidationError`` with its issues and paths; any other answer rejects with an error
naming the validator. A rejection stores nothing and attempts no write, in ownership mode
``none`` and under ``workflow-lease`` (where the validator runs on a read-only replay before
the claim is taken). The pydantic and Standard Schema types are stand-ins of the same shape.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest
from feature_support import Opener, WriteCount, make_engine, snapshot

from weft_serverless import Engine, UpdateValidationError, WorkflowContext, workflow
from weft_serverless.testing import VirtualClock

WF = "wf-verdicts"


class FakeValidationError(ValueError):
    """Shaped like pydantic's ``ValidationError``: ``errors()`` entries with ``loc`` and ``msg``."""

    def errors(self) -> list[dict[str, Any]]:
        return [
            {"type": "string_too_short", "loc": ("item", 0), "msg": "too short", "input": ""},
            {"type": "missing", "loc": ("qty",), "msg": "Field required", "input": {}},
        ]


@dataclass
class PathSegment:
    key: object


@dataclass
class SchemaIssue:
    message: str
    path: list[object] | None = None


@dataclass
class FailureResult:
    """Shaped like a Standard Schema failure result object: an ``issues`` list."""

    issues: list[SchemaIssue] = field(default_factory=list)


PYDANTIC_ISSUES = [
    {"message": "too short", "path": ["item", 0]},
    {"message": "Field required", "path": ["qty"]},
]

# case -> (what the validator returns, or the error it raises; the issues expected)
REJECTED: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "false": (False, [{"message": "rejected by validator", "path": None}]),
    "issue-list": (
        [{"message": "bad item", "path": ["item"]}, "plain text"],
        [{"message": "bad item", "path": ["item"]}, {"message": "plain text", "path": None}],
    ),
    "raises": (RuntimeError("no way"), [{"message": "no way", "path": None}]),
    "standard-schema-dict": (
        {"issues": [{"message": "must be positive", "path": [{"key": "amount"}, 2]}]},
        [{"message": "must be positive", "path": ["amount", 2]}],
    ),
    "standard-schema-object": (
        FailureResult([SchemaIssue("required", [PathSegment("items"), PathSegment(0)])]),
        [{"message": "required", "path": ["items", 0]}],
    ),
    "pydantic-raised": (FakeValidationError("2 validation errors"), PYDANTIC_ISSUES),
    "pydantic-returned": (FakeValidationError("2 validation errors"), PYDANTIC_ISSUES),
}
UNREADABLE = {
    "string": "yes",
    "one": 1,
    "empty-list": [],
    "success-shaped": {"value": 5},
    "empty-issues": {"issues": []},
    "object": object(),
}


def check_verdict(case: str) -> Any:
    """The validator under test: answers with the verdict the payload names."""
    if case in REJECTED:
        verdict = REJECTED[case][0]
        if isinstance(verdict, Exception) and case != "pydantic-returned":
            raise verdict
        return verdict
    if case in UNREADABLE:
        return UNREADABLE[case]
    return {"accept-none": None, "accept-true": True}[case]


def _verdicts(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, list[str]]:
    applied: list[str] = []

    def add(case: str) -> int:
        applied.append(case)
        return len(applied)

    ctx.on_update("add", add, validator=check_verdict)
    yield ctx.wait_until(lambda: len(applied) >= 2)
    return applied


VERDICTS = {"verdicts": workflow("verdicts").execute(_verdicts)}


def test_each_rejection_form_gives_its_issues_and_stores_nothing(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, VERDICTS)
    te.start("verdicts", id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    for case, (_, issues) in REJECTED.items():
        with pytest.raises(UpdateValidationError) as caught:
            te.update(WF, "add", case, update_id="u-rejected")
        assert caught.value.issues == issues, case
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes


def test_any_other_answer_rejects_naming_the_validator(storage_factory: Opener) -> None:
    """A Standard Schema success result, an empty list, a string, 1: none is ``None`` or
    ``True``, so each rejects (failing open would store a change the validator may have
    refused), with a message that names the validator and says what to return."""
    te = make_engine(storage_factory, VERDICTS)
    te.start("verdicts", id=WF)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    for case in UNREADABLE:
        with pytest.raises(UpdateValidationError, match="check_verdict") as caught:
            te.update(WF, "add", case)
        [issue] = caught.value.issues
        assert issue["path"] is None, case
        assert "return None or True to accept" in str(issue["message"]), case
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes


def test_none_and_true_accept(storage_factory: Opener) -> None:
    te = make_engine(storage_factory, VERDICTS)
    te.start("verdicts", id=WF)
    assert te.update(WF, "add", "accept-none") == 1
    assert te.update(WF, "add", "accept-true") == 2
    assert te.describe(WF).result == ["accept-none", "accept-true"]


@pytest.mark.parametrize("case", ["standard-schema-dict", "pydantic-raised", "string"])
def test_under_workflow_lease_a_rejection_writes_nothing(
    storage_factory: Opener, case: str
) -> None:
    """The early, read-only validation that spares the claim reads verdicts the same way."""
    storage = storage_factory()
    engine = Engine.create(
        storage,
        VERDICTS,
        ownership="workflow-lease",
        background_tasks="manual",
        clock=VirtualClock(),
        engine_id="e1",
    )
    with engine.invocation():
        engine.start("verdicts", id=WF)
    before, writes = snapshot(storage, [WF]), WriteCount.of(storage)
    with pytest.raises(UpdateValidationError):
        engine.update(WF, "add", case)
    assert snapshot(storage, [WF]) == before
    assert WriteCount.of(storage) == writes
    with engine.invocation():
        assert engine.update(WF, "add", "accept-none") == 1
    engine.close()
