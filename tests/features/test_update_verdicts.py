"""Update validators reject only with issues: whatever carries none accepts.

Each rejection form (``False``, a non-empty issue list, a raised or returned error, a
Standard Schema failure result, a pydantic ``ValidationError`` raised or returned) gives
``UpdateValidationError`` with its issues and paths. Every other answer accepts, as in
Weft's ``extractStandardSchemaIssues``: ``None``, ``True``, the validated value itself
(pydantic's ``model_validate`` returns the model), a Standard Schema success result
(``{"value": ...}``), an empty issue list, ``{"issues": []}``. A rejection stores nothing and
attempts no write, in ownership mode ``none`` and under ``workflow-lease`` (where the
validator runs on a read-only replay before the claim is taken). Pydantic is the real one;
the Standard Schema results are plain dicts and objects of that shape.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pytest
from feature_support import Opener, WriteCount, make_engine, snapshot

from weft_serverless import Engine, UpdateValidationError, WorkflowContext, workflow
from weft_serverless.testing import VirtualClock

WF = "wf-verdicts"
STOP = "stop"


class Order(pydantic.BaseModel):
    item: str = pydantic.Field(min_length=1)
    qty: int


class LookalikeValidationError(ValueError):
    """Shaped like pydantic's ``ValidationError`` (for libraries that copy its shape)."""

    def errors(self) -> list[dict[str, Any]]:
        return [{"type": "missing", "loc": ("qty",), "msg": "Field required", "input": {}}]


@dataclass
class PathSegment:
    key: object


@dataclass
class SchemaIssue:
    message: str
    path: list[object] | None = None


@dataclass
class SchemaResult:
    """Shaped like a Standard Schema result object: ``issues`` on failure, ``value`` else."""

    issues: list[SchemaIssue] = field(default_factory=list)
    value: object = None


def _pydantic_issues(payload: Any) -> list[dict[str, Any]]:
    try:
        Order.model_validate(payload)
    except pydantic.ValidationError as exc:
        return [{"message": e["msg"], "path": list(e["loc"])} for e in exc.errors()]
    raise AssertionError(f"{payload!r} is a valid Order")


BAD_ORDER = {"item": "", "qty": "many"}

# case -> (what the validator returns, or the error it raises; the issues expected)
REJECTED: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "false": (False, [{"message": "rejected by validator", "path": None}]),
    "issue-list": (
        [{"message": "bad item", "path": ["item"]}, "plain text"],
        [{"message": "bad item", "path": ["item"]}, {"message": "plain text", "path": None}],
    ),
    "raises": (RuntimeError("no way"), [{"message": "no way", "path": None}]),
    "returns-error": (ValueError("not like that"), [{"message": "not like that", "path": None}]),
    "standard-schema-dict": (
        {"issues": [{"message": "must be positive", "path": [{"key": "amount"}, 2]}]},
        [{"message": "must be positive", "path": ["amount", 2]}],
    ),
    "standard-schema-object": (
        SchemaResult([SchemaIssue("required", [PathSegment("items"), PathSegment(0)])]),
        [{"message": "required", "path": ["items", 0]}],
    ),
    "lookalike-raised": (
        LookalikeValidationError("1 validation error"),
        [{"message": "Field required", "path": ["qty"]}],
    ),
    "lookalike-returned": (
        LookalikeValidationError("1 validation error"),
        [{"message": "Field required", "path": ["qty"]}],
    ),
}
RAISED = {"raises", "lookalike-raised"}
ACCEPTED: dict[str, Any] = {
    "none": None,
    "true": True,
    "empty-list": [],
    "empty-tuple": (),
    "standard-schema-success": {"value": {"amount": 5}},
    "empty-issues": {"issues": []},
    "success-object": SchemaResult(value=5),
    "string": "yes",
    "zero": 0,
    "object": object(),
}


def check_verdict(payload: Any) -> Any:
    """The validator under test: a dict payload is an order, validated by pydantic the way
    an application would (the model on success, ``ValidationError`` raised on failure);
    a string names the verdict to answer with."""
    if isinstance(payload, dict):
        return Order.model_validate(payload)
    if payload in REJECTED:
        verdict = REJECTED[payload][0]
        if payload in RAISED:
            raise verdict
        return verdict
    return ACCEPTED.get(payload)


def _verdicts(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, list[Any]]:
    applied: list[Any] = []

    def add(payload: Any) -> int:
        applied.append(payload)
        return len(applied)

    ctx.on_update("add", add, validator=check_verdict)
    yield ctx.wait_until(lambda: STOP in applied)
    return applied


VERDICTS = {"verdicts": workflow("verdicts").execute(_verdicts)}


def _started(storage_factory: Opener) -> Any:
    te = make_engine(storage_factory, VERDICTS)
    te.start("verdicts", id=WF)
    return te


def test_each_rejection_form_gives_its_issues_and_stores_nothing(storage_factory: Opener) -> None:
    te = _started(storage_factory)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    for case, (_, issues) in REJECTED.items():
        with pytest.raises(UpdateValidationError) as caught:
            te.update(WF, "add", case, update_id="u-rejected")
        assert caught.value.issues == issues, case
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes


def test_a_pydantic_validation_error_gives_one_issue_per_error(storage_factory: Opener) -> None:
    te = _started(storage_factory)
    before, writes = snapshot(te.storage, [WF]), WriteCount.of(te.storage)
    with pytest.raises(UpdateValidationError) as caught:
        te.update(WF, "add", BAD_ORDER)
    assert caught.value.issues == _pydantic_issues(BAD_ORDER)
    assert [issue["path"] for issue in caught.value.issues] == [["item"], ["qty"]]
    assert snapshot(te.storage, [WF]) == before
    assert WriteCount.of(te.storage) == writes


def test_every_verdict_without_issues_accepts(storage_factory: Opener) -> None:
    """The validated model, a Standard Schema success result, an empty issue list, a string:
    none carries an issue, so each lets the update through (the handler runs, its result is
    returned and stored)."""
    te = _started(storage_factory)
    order = {"item": "book", "qty": 2}
    assert te.update(WF, "add", order) == 1
    for count, case in enumerate(ACCEPTED, start=2):
        assert te.update(WF, "add", case) == count, case
    te.update(WF, "add", STOP)
    assert te.describe(WF).result == [order, *ACCEPTED, STOP]


@pytest.mark.parametrize("case", ["standard-schema-dict", "raises", "false"])
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
        assert engine.update(WF, "add", "standard-schema-success") == 1
        assert engine.update(WF, "add", {"item": "pen", "qty": 1}) == 2
    engine.close()
