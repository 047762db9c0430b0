"""Idempotent activities: ``ctx.run(..., idempotency_key=)`` and ``activity(fn, verify=)``.

Rules pinned here: a "started" record is committed before the activity runs; if a crash leaves
that record without the step's completion, recovery does not run the activity blindly but asks
``verify(input, key)``: ``not_completed`` runs it again, ``completed(result)`` records that
result without running it, ``result_unavailable`` raises ``ActivityFailedError`` with
``error_type == "ActivityResultUnavailable"`` at the yield, and ``indeterminate``, a verifier
that raises, or no verifier at all fail the run closed (``ActivityReconciliationError``).
A crash after the step's completion needs no reconciliation. An ordinary failed attempt
followed by a retry is not a crash and is not reconciled.
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import (
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_op,
    puts_prefix,
    recover_fresh,
    sorts_with,
)

from weft_serverless import (
    ActivityFailedError,
    InvalidArgumentError,
    RetryPolicy,
    Verification,
    WorkflowDefinition,
    activity,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import SimulatedCrash

WF = "wf-pay"
ORDER = {"id": 7, "amount": 30}
KEY = "charge-7"


class Bank:
    """A payment provider: ``charge`` books a payment; ``crash_on`` kills the process right
    after booking the given call (1-based), before the engine hears the result."""

    def __init__(self, verdict: Verification | None = None, *, crash_on: int = 0) -> None:
        self.ledger: list[Any] = []
        self.verify_calls: list[tuple[Any, str]] = []
        self.verdict = verdict
        self.crash_on = crash_on
        self.notified: list[Any] = []
        self.storage: Storage | None = None
        self.started_seen: list[bool] = []

    def charge(self, order: dict[str, Any]) -> str:
        if self.storage is not None:
            started = sorts_with(self.storage, WF, keys.ACTIVITY_STARTED_PREFIX)
            self.started_seen.append(bool(started))
        self.ledger.append(order["id"])
        if len(self.ledger) == self.crash_on:
            raise SimulatedCrash("process died after the payment was booked")
        return f"receipt-{order['id']}-{len(self.ledger)}"

    def verify(self, order: Any, key: str) -> Verification:
        self.verify_calls.append((order, key))
        if self.verdict is None:
            raise ConnectionError("provider unreachable")
        return self.verdict

    def notify(self, receipt: str) -> None:
        self.notified.append(receipt)


def _pay(ctx: Any, order: dict[str, Any]) -> Any:
    try:
        receipt = yield ctx.run(
            "charge", order, idempotency_key=f"charge-{order['id']}", retry=RetryPolicy(3, 1)
        )
    except ActivityFailedError as exc:
        return {"error": exc.error_type}
    yield ctx.run("notify", receipt)
    return {"receipt": receipt}


def _workflows(bank: Bank, *, with_verify: bool = True) -> dict[str, WorkflowDefinition]:
    charge = activity(bank.charge, verify=bank.verify if with_verify else None)
    builder = workflow("pay").activities(charge=charge, notify=bank.notify)
    return {"pay": builder.execute(_pay)}


def test_started_record_is_written_before_the_activity_runs(storage_factory: Opener) -> None:
    """Normal path: the activity runs once with the "started" record already stored, the step
    completes, and no verification is asked for."""
    bank = Bank()
    te = make_engine(storage_factory, _workflows(bank))
    bank.storage = te.storage
    te.start("pay", ORDER, id=WF)
    assert bank.started_seen == [True]
    assert te.describe(WF).result == {"receipt": "receipt-7-1"}
    assert bank.verify_calls == []
    assert bank.notified == ["receipt-7-1"]


@pytest.mark.parametrize(
    ("verdict", "ledger", "result"),
    [
        (Verification.not_completed(), [7, 7], {"receipt": "receipt-7-2"}),
        (Verification.completed("receipt-from-bank"), [7], {"receipt": "receipt-from-bank"}),
        (Verification.result_unavailable(), [7], {"error": "ActivityResultUnavailable"}),
    ],
    ids=["not-completed", "completed", "result-unavailable"],
)
def test_crash_between_start_record_and_completion_asks_verify(
    storage_factory: Opener, verdict: Verification, ledger: list[int], result: dict[str, Any]
) -> None:
    """The process dies after the payment was booked but before the step committed; the fresh
    engine asks ``verify(input, key)`` and follows its verdict."""
    bank = Bank(verdict, crash_on=1)
    te = make_engine(storage_factory, _workflows(bank))
    with expect_crash():
        te.start("pay", ORDER, id=WF)
    recover_fresh(te, storage_factory)
    assert bank.verify_calls == [(ORDER, KEY)]
    assert bank.ledger == ledger
    assert te.describe(WF).result == result
    assert bank.notified == ([result["receipt"]] if "receipt" in result else [])


def test_crash_right_after_the_start_record(storage_factory: Opener) -> None:
    """Crash right after the "started" record lands (the activity never ran): ``not_completed``
    makes recovery run it, exactly once in all."""
    bank = Bank(Verification.not_completed())
    te, crashing = crashable_engine(storage_factory, _workflows(bank))
    crashing.arm(puts_prefix(keys.ACTIVITY_STARTED_PREFIX, WF), after=True)
    with expect_crash():
        te.start("pay", ORDER, id=WF)
    assert bank.ledger == []
    recover_fresh(te, storage_factory)
    assert bank.verify_calls == [(ORDER, KEY)]
    assert bank.ledger == [7]
    assert te.describe(WF).result == {"receipt": "receipt-7-1"}


def test_crash_after_the_completion_needs_no_reconciliation(storage_factory: Opener) -> None:
    """Crash right after the step's commit: recovery replays the result; no verify, no re-run."""
    bank = Bank(Verification.indeterminate())
    te, crashing = crashable_engine(storage_factory, _workflows(bank))
    crashing.arm(puts_op(WF, 0), after=True)
    with expect_crash():
        te.start("pay", ORDER, id=WF)
    recover_fresh(te, storage_factory)
    assert bank.verify_calls == []
    assert bank.ledger == [7]
    assert te.describe(WF).result == {"receipt": "receipt-7-1"}


@pytest.mark.parametrize(
    ("verdict", "with_verify"),
    [
        (Verification.indeterminate(), True),
        (None, True),  # the verifier raises: treated as indeterminate
        (Verification.completed(object()), True),  # a verified result the codec cannot store
        (Verification.not_completed(), False),  # no verifier at all
    ],
    ids=["indeterminate", "verify-raises", "unencodable-result", "no-verifier"],
)
def test_undecidable_reconciliation_fails_the_run_closed(
    storage_factory: Opener, verdict: Verification | None, with_verify: bool
) -> None:
    """When reconciliation cannot decide, the run ends ``failed`` with an
    ``ActivityReconciliationError`` and the activity is not run again."""
    bank = Bank(verdict, crash_on=1)
    te = make_engine(storage_factory, _workflows(bank, with_verify=with_verify))
    with expect_crash():
        te.start("pay", ORDER, id=WF)
    recover_fresh(te, storage_factory)
    assert bank.ledger == [7]
    description = te.describe(WF)
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "ActivityReconciliationError"


def test_a_retry_after_a_failed_attempt_is_not_a_crash(storage_factory: Opener) -> None:
    """An idempotent activity whose first attempt fails normally is retried after its backoff
    without consulting ``verify`` (there was no crash), and the run completes."""
    attempts: list[int] = []

    def flaky(order: dict[str, Any]) -> str:
        attempts.append(order["id"])
        if len(attempts) == 1:
            raise ConnectionError("provider timeout")
        return "receipt"

    builder = workflow("pay").activities(charge=flaky, notify=lambda _: None)
    te = make_engine(storage_factory, {"pay": builder.execute(_pay)})
    te.start("pay", ORDER, id=WF)
    te.advance(1)
    assert attempts == [7, 7]
    assert te.describe(WF).result == {"receipt": "receipt"}


def test_bad_idempotency_arguments_fail_at_the_call(storage_factory: Opener) -> None:
    """An empty key fails the ``ctx.run`` call (the run fails, nothing runs); a non-callable
    verifier is refused when the activity is declared."""
    ran: list[Any] = []

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.run("charge", 1, idempotency_key=""))

    te = make_engine(
        storage_factory, {"bad": workflow("bad").activities(charge=ran.append).execute(body)}
    )
    te.start("bad", id=WF)
    description = te.describe(WF)
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "InvalidArgumentError"
    assert ran == []
    with pytest.raises(InvalidArgumentError):
        activity(ran.append, verify="yes")  # type: ignore[arg-type]
