"""The runs page: a filtered, paged list of runs with counts per status, refreshed live.

The list and the counts are read through ``calls.call`` (``list_workflows`` with
``counts=status``: the page and the count of each status from one read of the index), so
the filters are the API's and a refused one is shown with the API's message (and status
400), never a 500. The table and the counts are one fragment that htmx fetches again every
``refresh_seconds`` with the same filters while the tab is shown, so the form is never
replaced.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template, request

from weft_serverless import WORKFLOW_STATUSES
from weft_serverless.aws.responses import ApiError
from weft_serverless.console import actions, run_filters
from weft_serverless.console.run_filters import RunFilters

blueprint = Blueprint("runs", __name__)


@blueprint.get("/")
def index() -> tuple[str, int]:
    filters = run_filters.parse(request.args, request.args.getlist("back"))
    view = _read(filters)
    template = "_runs_live.html" if request.headers.get("HX-Request") else "runs.html"
    return render_template(template, **view), _status_of(view)


@blueprint.get("/runs-fragment")
def fragment() -> tuple[str, int]:
    """The live part of the page (counts, table, paging), for htmx to swap in."""
    view = _read(run_filters.parse(request.args, request.args.getlist("back")))
    return render_template("_runs_live.html", **view), _status_of(view)


def _read(filters: RunFilters) -> dict[str, Any]:
    """What the page shows: the page of runs and the counts per status, or the refusal."""
    view: dict[str, Any] = {
        "filters": filters,
        "statuses": WORKFLOW_STATUSES,
        "runs": [],
        "next_cursor": None,
        "counts": {},
        "error": None,
    }
    try:
        query = {**filters.list_query(), "counts": "status"}
    except ApiError as exc:  # a start time that is not a time
        view["error"] = actions.refusal("list_workflows", exc)
        return view
    listed = actions.read("list_workflows", query=query)  # the page and its status counts
    if not listed.ok:
        view["error"] = listed
        return view
    view["runs"] = listed.body["items"]
    view["next_cursor"] = listed.body["next_cursor"]
    view["counts"] = {entry["value"]: entry["count"] for entry in listed.body["counts"]}
    return view


def _status_of(view: dict[str, Any]) -> int:
    error = view["error"]
    return 200 if error is None else int(error.status)
