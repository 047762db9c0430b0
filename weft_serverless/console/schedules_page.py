"""The schedules page: every schedule, its next fires, and pause, resume and trigger."""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("schedules", __name__, url_prefix="/schedules")


@blueprint.get("/")
def index() -> str:
    return render_template("schedules.html")
