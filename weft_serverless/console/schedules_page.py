"""The schedules page: every schedule, its next fires, and pause, resume and trigger.

The list is read through ``calls.call`` (``list_schedules``), and each action goes through
``actions.perform``, so a read-only console refuses it (403) even when posted by hand. An
action answers with the schedule's row read again, its outcome shown in the row.
"""

from __future__ import annotations

from flask import Blueprint, render_template

from . import actions

blueprint = Blueprint("schedules", __name__, url_prefix="/schedules")

DONE = {"pause": "paused", "resume": "resumed", "trigger": "triggered"}
"""What an action's success says, by action."""


@blueprint.get("/")
def index() -> tuple[str, int]:
    listed = actions.read("list_schedules")
    schedules = listed.body["items"] if listed.ok else []
    error = None if listed.ok else listed
    return render_template("schedules.html", schedules=schedules, error=error), listed.status


@blueprint.post("/<path:schedule_id>/<any(pause, resume, trigger):action>")
def act(schedule_id: str, action: str) -> tuple[str, int]:
    """Carry out ``action`` and answer the schedule's row, read again, with the outcome."""
    params = {"schedule_id": schedule_id}
    outcome = actions.perform(f"{action}_schedule", params=params)
    started = outcome.body.get("workflow_id") if outcome.ok and action == "trigger" else None
    described = actions.read("describe_schedule", params=params)
    schedule = described.body if described.ok else None
    page = render_template(
        "_schedule_row.html",
        schedule=schedule,
        schedule_id=schedule_id,
        outcome=outcome,
        done=DONE[action] if started or action != "trigger" else "triggered: no run started",
        started=started,
    )
    return page, outcome.status
