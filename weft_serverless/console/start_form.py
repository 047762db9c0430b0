"""Start a run from the console: a workflow type of the console's registry, an input as JSON.

Shown when the console was given the workflows (``weft console --workflows MODULE``), since
a start drives the run's first steps here. The input is decoded from the form's JSON text;
everything else is the ``start_workflow`` route's, through ``actions.perform``. A module's
``SAMPLES`` dict (``examples.workflows`` has one) fills the input when a type is picked.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Response, render_template, request, url_for

from weft_serverless.aws.responses import bad_request
from weft_serverless.console import actions

blueprint = Blueprint("start", __name__)


@blueprint.post("/start")
def start() -> Response | tuple[str, int]:
    body: dict[str, Any] = {"workflow_type": request.form.get("workflow_type", "")}
    workflow_id = request.form.get("id", "").strip()
    if workflow_id:
        body["id"] = workflow_id
    tags = [tag.strip() for tag in request.form.get("tags", "").split(",") if tag.strip()]
    if tags:
        body["tags"] = tags
    text = request.form.get("input", "").strip()
    try:
        body["input"] = json.loads(text) if text else None
    except ValueError as exc:
        outcome = actions.refusal("start_workflow", bad_request("input", f"is not JSON ({exc})"))
        return render_template("_outcome.html", outcome=outcome), outcome.status
    outcome = actions.perform("start_workflow", body=body)
    if not outcome.ok:
        return render_template("_outcome.html", outcome=outcome), outcome.status
    answer = Response("", 204)
    answer.headers["HX-Redirect"] = url_for("run.show", workflow_id=outcome.body["id"])
    return answer
