"""A human approval: wait for an "approve" or "reject" signal, escalate when nobody answers.

What it shows: ``ctx.race`` between two signals and a durable timer (the approver's deadline);
on timeout the request is escalated to a manager with a second deadline, and if that passes
too the request expires. ``ctx.on_query("status")`` answers where the request stands without
changing anything, and ``ctx.on_update("comment")`` adds a comment while the workflow waits
(a validator rejects empty comments before anything is stored).

The deadlines come from the input (``approver_timeout``, ``manager_timeout``; default one day
each), so a demo can use seconds. Nothing sleeps in a process: the wait is a stored timer
that the maintenance schedule fires.

Try it under ``weft dev`` (the port is printed at startup)::

    curl -s -X POST localhost:8080/workflows -H 'content-type: application/json' \\
      -d '{"workflow_type": "approval", "id": "exp-7", "input": {"request_id": "exp-7",
           "requester": "ada", "approver": "grace", "manager": "alan",
           "summary": "conference ticket", "amount_cents": 45000,
           "approver_timeout": "2m", "manager_timeout": "5m"}}'
    curl -s -X POST localhost:8080/workflows/exp-7/queries/status
    curl -s -X POST localhost:8080/workflows/exp-7/updates/comment \\
      -H 'content-type: application/json' -d '{"payload": {"by": "ada", "text": "cheaper early"}}'
    curl -s -X POST localhost:8080/workflows/exp-7/signals/approve \\
      -H 'content-type: application/json' -d '{"payload": {"by": "grace"}}'
    curl -s localhost:8080/workflows/exp-7/result

Leave out the signal and the request is escalated after ``approver_timeout`` (watch the
``[notify]`` lines in the ``weft dev`` log), then expires after ``manager_timeout``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from weft_serverless import UpdateValidationError, WorkflowContext, workflow

Request = dict[str, Any]

APPROVE = "approve"
REJECT = "reject"
DEFAULT_TIMEOUT = "1d"
MAX_COMMENT_CHARS = 500


def notify(message: dict[str, Any]) -> dict[str, Any]:
    """Send a notification; its id is derived from request and purpose, so a repeat is one."""
    print(f"  [notify]    to {message['to']}: {message['text']}")
    return {"notification_id": f"{message['request_id']}-{message['purpose']}"}


def record_decision(outcome: dict[str, Any]) -> dict[str, Any]:
    """Write the outcome to the (pretend) expense system, keyed by request id."""
    print(f"  [expenses]  {outcome['request_id']}: {outcome['decision']}")
    return {"recorded": outcome["request_id"]}


def _validate_comment(comment: Any) -> None:
    """Reject a malformed comment before anything is stored, naming each problem."""
    issues: list[dict[str, object]] = []
    if not isinstance(comment, dict):
        raise UpdateValidationError("a comment is an object with 'by' and 'text'")
    if not isinstance(comment.get("by"), str) or not comment["by"]:
        issues.append({"message": "'by' must name who comments", "path": ["by"]})
    text = comment.get("text")
    if not isinstance(text, str) or not text.strip():
        issues.append({"message": "'text' must not be empty", "path": ["text"]})
    elif len(text) > MAX_COMMENT_CHARS:
        issues.append(
            {"message": f"'text' is over {MAX_COMMENT_CHARS} characters", "path": ["text"]}
        )
    if issues:
        raise UpdateValidationError(issues)


def approval(ctx: WorkflowContext, request: Request) -> Generator[Any, Any, dict[str, Any]]:
    """Ask the approver, escalate to the manager on silence, expire on further silence."""
    state: dict[str, Any] = {"stage": "submitted", "waiting_for": None, "comments": []}

    def add_comment(comment: dict[str, Any]) -> int:
        state["comments"].append({"by": comment["by"], "text": comment["text"].strip()})
        return len(state["comments"])

    ctx.on_query("status", lambda _: dict(state))
    ctx.on_update("comment", add_comment, validator=_validate_comment)

    rid = request["request_id"]
    text = f"{request['requester']} asks approval: {request['summary']}"
    text += f" ({request['amount_cents'] / 100:.2f})"
    yield ctx.run(
        notify, {"request_id": rid, "purpose": "ask", "to": request["approver"], "text": text}
    )
    state.update(stage="awaiting-approver", waiting_for=request["approver"])
    decision = yield from _decision(ctx, request.get("approver_timeout", DEFAULT_TIMEOUT))

    if decision is None:
        state.update(stage="escalated", waiting_for=request["manager"])
        escalation = f"no answer from {request['approver']}; {text}"
        yield ctx.run(
            notify,
            {
                "request_id": rid,
                "purpose": "escalate",
                "to": request["manager"],
                "text": escalation,
            },
        )
        decision = yield from _decision(ctx, request.get("manager_timeout", DEFAULT_TIMEOUT))

    outcome = {
        "request_id": rid,
        "decision": "expired" if decision is None else decision["decision"],
        "decided_by": None if decision is None else decision["by"],
        "escalated": state["stage"] == "escalated",
        "comments": state["comments"],
    }
    state.update(stage=outcome["decision"], waiting_for=None)
    yield ctx.run(record_decision, outcome)
    yield ctx.run(
        notify,
        {
            "request_id": rid,
            "purpose": "outcome",
            "to": request["requester"],
            "text": f"your request {rid} is {outcome['decision']}",
        },
    )
    return outcome


def _decision(
    ctx: WorkflowContext, timeout: str | float
) -> Generator[Any, Any, dict[str, Any] | None]:
    """The first of "approve", "reject" or the deadline; None when the deadline won."""
    index, payload = yield ctx.race(
        ctx.wait_for_signal(APPROVE), ctx.wait_for_signal(REJECT), ctx.sleep(timeout)
    )
    if index == 2:
        return None
    by = (payload or {}).get("by", "unknown") if isinstance(payload, dict) else "unknown"
    return {"decision": "approved" if index == 0 else "rejected", "by": by}


approval_workflow = (
    workflow("approval", version="1")
    .activities(notify=notify, record_decision=record_decision)
    .execute(approval)
)

workflows = {"approval": approval_workflow}

SAMPLE_INPUT: Request = {
    "request_id": "exp-7",
    "requester": "ada",
    "approver": "grace",
    "manager": "alan",
    "summary": "conference ticket",
    "amount_cents": 45000,
    "approver_timeout": "2m",
    "manager_timeout": "5m",
}
