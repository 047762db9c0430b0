"""The schedules page: every schedule, its next fires, and create, pause, resume, trigger,
backfill and delete.

The list is read through ``calls.call`` (``list_schedules``), and each action goes through
``actions.perform`` with the route's own operation, so its checks and refusals are the
API's, and a read-only console refuses it (403) even when posted by hand. An action on a
schedule answers with its row read again, its outcome shown in the row; a created schedule
opens the page again at its row. The form turns what an operator types into the API's
fields: JSON for the input, a number typed where the API takes seconds or epoch seconds
as a number, and a UTC ``datetime-local`` time (the backfill window) as epoch seconds.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from flask import Blueprint, Response, render_template, request, url_for

from weft_serverless.aws.responses import ApiError, bad_request
from weft_serverless.aws.route_types import OVERLAPS
from weft_serverless.console import actions
from weft_serverless.console.actions import Outcome
from weft_serverless.console.run_filters import epoch_seconds

blueprint = Blueprint("schedules", __name__, url_prefix="/schedules")

DONE = {
    "pause": "paused",
    "resume": "resumed",
    "trigger": "triggered",
    "delete": "deleted; the runs it started go on",
}
"""What an action's success says, by action."""
CREATE_TEXT = ("schedule_id", "workflow_type", "cron", "timezone", "overlap")
"""Fields of the create form passed as typed."""
CREATE_NUMERIC = ("every", "catchup_window", "jitter", "start_at", "end_at")
"""Fields the API takes as a number or as text (a duration, an ISO 8601 time)."""
BACKFILL_SHOWN = 10
"""Runs a backfill's answer links; the rest are counted."""


@blueprint.get("/")
def index() -> tuple[str, int]:
    listed = actions.read("list_schedules")
    schedules = listed.body["items"] if listed.ok else []
    error = None if listed.ok else listed
    page = render_template(
        "schedules.html",
        schedules=schedules,
        error=error,
        created=request.args.get("created"),
        overlaps=OVERLAPS,
    )
    return page, listed.status


@blueprint.post("/")
def create() -> Response | tuple[str, int]:
    """Create a schedule from the form; open the page again at its row."""
    try:
        body = _create_body(request.form)
    except ApiError as exc:
        outcome = actions.refusal("create_schedule", exc)
    else:
        outcome = actions.perform("create_schedule", body=body)
    if not outcome.ok:
        return render_template("_outcome.html", outcome=outcome), outcome.status
    created = str(outcome.body["id"])
    answer = Response("", 204)
    answer.headers["HX-Redirect"] = (
        f"{url_for('schedules.index', created=created)}#schedule-{quote(created, safe='')}"
    )
    return answer


@blueprint.post("/<path:schedule_id>/<any(pause, resume, trigger, delete):action>")
def act(schedule_id: str, action: str) -> tuple[str, int]:
    """Carry out ``action`` and answer the schedule's row, read again, with the outcome."""
    outcome = actions.perform(f"{action}_schedule", params={"schedule_id": schedule_id})
    started = outcome.body.get("workflow_id") if outcome.ok and action == "trigger" else None
    done = DONE[action] if started or action != "trigger" else "triggered: no run started"
    return _row(schedule_id, outcome, done, [started] if started else [])


@blueprint.post("/<path:schedule_id>/backfill")
def backfill(schedule_id: str) -> tuple[str, int]:
    """Start the fires of a past window (UTC ``datetime-local`` bounds) as the API does."""
    params = {"schedule_id": schedule_id}
    try:
        body = {name: _instant(name, request.form.get(name, "")) for name in ("start", "end")}
    except ApiError as exc:
        outcome = actions.refusal("backfill_schedule", exc)
    else:
        outcome = actions.perform("backfill_schedule", params=params, body=body)
    started = list(outcome.body["workflow_ids"]) if outcome.ok else []
    done = f"backfilled: {len(started)} run(s) started"
    return _row(schedule_id, outcome, done, started)


def _row(schedule_id: str, outcome: Outcome, done: str, started: list[str]) -> tuple[str, int]:
    described = actions.read("describe_schedule", params={"schedule_id": schedule_id})
    page = render_template(
        "_schedule_row.html",
        schedule=described.body if described.ok else None,
        schedule_id=schedule_id,
        outcome=outcome,
        done=done,
        started=started[:BACKFILL_SHOWN],
        more=max(0, len(started) - BACKFILL_SHOWN),
    )
    return page, outcome.status


def _create_body(form: Any) -> dict[str, Any]:
    """The create form as the API's body: blank fields left out, the input decoded."""
    body: dict[str, Any] = {
        name: form.get(name, "").strip() for name in CREATE_TEXT if form.get(name, "").strip()
    }
    for name in CREATE_NUMERIC:
        text = form.get(name, "").strip()
        if text:
            body[name] = _number_or_text(text)
    text = form.get("input", "").strip()
    if text:
        try:
            body["input"] = json.loads(text)
        except ValueError as exc:
            raise bad_request("input", f"is not JSON ({exc})") from None
    return body


def _number_or_text(text: str) -> float | str:
    """``90`` as seconds, ``90s`` or ``2026-12-02T05:40:00+00:00`` as the API reads them."""
    try:
        return float(text)
    except ValueError:
        return text


def _instant(name: str, text: str) -> float:
    """A backfill bound: ``datetime-local`` text read as UTC, or epoch seconds."""
    if not text.strip():
        raise bad_request(name, "is required")
    return epoch_seconds(name, text.strip())
