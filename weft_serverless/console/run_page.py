"""A run's page: its state, its step timeline and the actions an operator may take on it."""

from __future__ import annotations

from flask import Blueprint, render_template

blueprint = Blueprint("run", __name__, url_prefix="/runs")


@blueprint.get("/<path:workflow_id>")
def show(workflow_id: str) -> str:
    return render_template("run.html", workflow_id=workflow_id)
