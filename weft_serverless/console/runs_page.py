"""The runs page: a filtered, paged list of runs with counts per status, refreshed live."""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("runs", __name__)


@blueprint.get("/")
def index() -> str:
    return render_template("runs.html")
