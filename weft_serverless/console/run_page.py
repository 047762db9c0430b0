"""A run's page: its state, its step timeline and the actions an operator may take on it.

The page is one server-rendered section (header, timeline, events, teardown) that htmx
reloads every ``refresh_seconds`` while the run is not finished, and a panel of actions
outside it, so a payload being typed survives a refresh. Each action posts here, goes
through ``actions.perform`` (the API's own validation and refusals) and answers with its
outcome plus the refreshed section, swapped in out of band.

Values longer than ``formatting.FOLD_CHARS`` are folded: the page carries their first
characters only, and the whole value is fetched when the operator opens it, so a large
input (possibly offloaded to S3) does not weigh on every refresh.

Sub-resources hang under the run's path (``/runs/<id>/section``, ``/value/<which>``,
``/act/<action>``): an id that itself ends in one of those suffixes is shown by its page
but its sub-resources are unreachable, a corner not worth a second URL scheme.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, abort, render_template, request

from weft_serverless import (
    Engine,
    Waiting,
    WorkflowNotFoundError,
    jsonable,
    replay_view,
    waiting_for,
)
from weft_serverless.aws.responses import bad_request
from weft_serverless.console import actions, formatting
from weft_serverless.console.actions import Outcome
from weft_serverless.console.run_actions import Panel, panel_of, signal_warning
from weft_serverless.console.state import current_console
from weft_serverless.console.timeline import RunView, read_run

blueprint = Blueprint("run", __name__, url_prefix="/runs")

VALUES = ("input", "result", "error")
"""The run's values the page folds and serves on demand."""
STEP_VALUES = ("input", "output", "buffered")
"""Values of its steps and buffered signals, ``<kind>@<slot or position>``."""
PLAIN = {
    "cancel": "cancel_workflow",
    "suspend": "suspend_workflow",
    "resume": "resume_workflow",
    "retry": "retry_workflow",
    "purge": "purge_workflow",
}
"""Actions with no fields: the button's name and the API operation it performs."""
NAMED = {"signal": "signal_workflow", "update": "update_workflow", "query": "query_workflow"}
"""Actions with a name and a JSON value: the form's name and its operation."""
VALUE_FIELD = {"signal": "payload", "update": "payload", "query": "arg"}
"""The body field each named action's JSON goes in, as the route table names it."""


@blueprint.get("/<path:workflow_id>")
def show(workflow_id: str) -> tuple[str, int]:
    view = _view_or_none(workflow_id)
    if view is None:
        return render_template("run_missing.html", workflow_id=workflow_id), 404
    page = render_template("run.html", view=view, workflow_id=workflow_id, panel=_panel(view))
    return page, 200


@blueprint.get("/<path:workflow_id>/section")
def section(workflow_id: str) -> str:
    """The run section alone, for the live refresh, and the actions panel out of band when
    it no longer offers what the page shows (``shown``: the key of the panel there)."""
    return _refreshed(workflow_id, _view_or_none(workflow_id), request.args.get("shown"))


@blueprint.get("/<path:workflow_id>/value/<which>")
def value(workflow_id: str, which: str) -> str:
    """One of the run's values in full, when the operator unfolds it: ``input``, ``result``
    or ``error``; a step's ``input@<slot>`` or ``output@<slot>``; ``buffered@<n>``."""
    kind, _, where = which.partition("@")
    if which not in VALUES and kind not in STEP_VALUES:
        abort(404)
    try:
        if which in VALUES:
            return render_template(
                "_value_full.html", value=getattr(_engine().describe(workflow_id), which)
            )
        replay = replay_view(_engine(), workflow_id)
    except WorkflowNotFoundError:
        abort(404)
    values: dict[str, Any] = {
        "input": dict(replay.inputs),
        "output": dict(replay.outputs),
        "buffered": {str(n): payload for n, (_, payload) in enumerate(replay.buffered)},
    }[kind]
    if where not in values:
        abort(404)
    return render_template("_value_full.html", value=values[where])


@blueprint.post("/<path:workflow_id>/act/<action>")
def act(workflow_id: str, action: str) -> str:
    """Carry out ``action`` on the run; answer its outcome and the refreshed section."""
    params = {"workflow_id": workflow_id}
    body: dict[str, Any] | None = None
    shown = request.form.get("shown")
    warning = None
    if action in PLAIN:
        operation = PLAIN[action]
    elif action in NAMED:
        operation = NAMED[action]
        params["name"] = request.form.get("name", "").strip()
        field = VALUE_FIELD[action]
        body = {}
        try:
            body.update(_json_field(field, request.form.get(field, "")))
        except ValueError as exc:
            refused = actions.refusal(operation, bad_request(field, str(exc)))
            return _answer(workflow_id, action, refused, shown)
        if action == "signal" and params["name"]:
            warning = signal_warning(params["name"], _waiting(workflow_id))
    else:
        abort(404)
    outcome = actions.perform(operation, params=params, body=body)
    return _answer(workflow_id, action, outcome, shown, warning if outcome.ok else None)


def _json_field(field: str, text: str) -> dict[str, Any]:
    """The form's JSON text as the body field ``field``; nothing when left empty."""
    if not text.strip():
        return {}
    try:
        return {field: json.loads(text, parse_constant=_not_json)}
    except ValueError as exc:
        raise ValueError(f"is not valid JSON ({exc})") from None


def _not_json(constant: str) -> Any:
    """NaN and Infinity, which Python's parser accepts and JSON (and the API) do not."""
    raise ValueError(f"{constant} is not a JSON value")


def _answer(
    workflow_id: str,
    action: str,
    outcome: Outcome,
    shown: str | None,
    warning: str | None = None,
) -> str:
    result = None
    if outcome.ok and action in ("update", "query") and isinstance(outcome.body, dict):
        result = jsonable(outcome.body.get("result"))
    return render_template(
        "_run_answer.html",
        outcome=outcome,
        done=_done(action, outcome),
        warning=warning,
        result=result,
        has_result=result is not None or (outcome.ok and action in ("update", "query")),
        section=_refreshed(workflow_id, _view_or_none(workflow_id), shown, oob=True),
    )


def _done(action: str, outcome: Outcome) -> str:
    """What a successful action says, with the run's status when the API answered it."""
    body = outcome.body if isinstance(outcome.body, dict) else {}
    if action == "purge":
        return "purged: the run and its history are gone"
    if action in ("update", "query"):
        return f"{action} {body.get(action, '')!s} answered"
    status = body.get("status")
    said = f"{action} sent" if action == "signal" else f"{action}: done"
    return f"{said}; the run is {status}" if status else said


def _refreshed(
    workflow_id: str, view: RunView | None, shown: str | None, *, oob: bool = False
) -> str:
    """The run section, and the actions panel (out of band) if it differs from ``shown``."""
    panel = _panel(view)
    page = render_template(
        "_run_section.html", view=view, workflow_id=workflow_id, oob=oob, panel=panel
    )
    if panel is not None and panel.key != shown:
        page += render_template(
            "_run_action_forms.html", workflow_id=workflow_id, panel=panel, oob=True
        )
    return page


def _panel(view: RunView | None) -> Panel | None:
    """The actions panel of the run seen in ``view``; none in a read-only console."""
    console = current_console()
    if view is None or console.read_only:
        return None
    queries = view.replay.queries if view.replay is not None else ()
    return panel_of(view.run.status, view.waiting, queries, drives=console.drives)


def _waiting(workflow_id: str) -> Waiting | None:
    try:
        return waiting_for(_engine(), workflow_id)
    except WorkflowNotFoundError:
        return None


def _view_or_none(workflow_id: str) -> RunView | None:
    try:
        return read_run(_engine(), workflow_id)
    except WorkflowNotFoundError:
        return None


def _engine() -> Engine:
    return current_console().engine


@blueprint.app_template_filter("fold")
def fold(value: Any) -> str:
    """The first ``FOLD_CHARS`` characters of a folded value's one-line JSON."""
    return formatting.compact(value)[: formatting.FOLD_CHARS]
