"""The console's Flask app: one engine, its pages as blueprints, and what every page shares.

The engine is built by the caller (``weft console`` opens the target as the CLI does) and
kept for the app's life. Pages read through it; actions go through ``actions.perform``. In
read-only mode the app is given a reader engine and every action is hidden and refused.
Pages reach the console of the current request through ``state.current_console``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, redirect, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from weft_serverless.console import formatting, run_page, runs_page, schedules_page, start_form
from weft_serverless.console.state import CONSOLE_KEY, Console, current_console
from weft_serverless.loopback import host_name

__all__ = ["Console", "create_app"]

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "style-src-attr 'unsafe-inline'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
"""The console's own files and nothing else: no inline or foreign script, no inline style
sheet (style attributes are allowed: the timeline places its bars with them), requests
only to itself, and no page of any origin may frame it (clickjacking). ADR 0046."""
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def create_app(console: Console, *, config: Mapping[str, Any] | None = None) -> Flask:
    """The WSGI app for ``console``: serve it with any WSGI server (``server.serve``)."""
    app = Flask(__name__)
    app.config.update(config or {})
    app.extensions[CONSOLE_KEY] = console
    formatting.install(app)
    for page in (runs_page, run_page, schedules_page, start_form):
        app.register_blueprint(page.blueprint)

    app.before_request(refuse_other_hosts)
    app.before_request(refuse_cross_site_posts)
    app.after_request(add_security_headers)

    @app.get("/favicon.ico")
    def favicon() -> WerkzeugResponse:
        """Where a browser looks for the icon before it reads a page's link to it."""
        return redirect(url_for("static", filename="favicon.svg"), 308)

    @app.context_processor
    def shared() -> dict[str, Any]:
        return {"console": console}

    return app


def add_security_headers(response: Response) -> Response:
    """Send the console's policy with every answer, refusals and assets included: a page
    of another site may not frame it, and nothing but its own files runs in it."""
    response.headers.update(SECURITY_HEADERS)
    return response


def refuse_other_hosts() -> tuple[str, int] | None:
    """Answer only requests addressed to loopback by name. A site whose name an attacker
    re-points at 127.0.0.1 (DNS rebinding) is same-origin for the browser, so it could read
    pages and send the HX-Request header; its requests still carry its own name as Host."""
    allowed = current_console().allowed_hosts
    if allowed is None:
        return None
    host = host_name(request.host or "")
    if host not in allowed:
        return f"refused: this console answers {', '.join(sorted(allowed))} only", 403
    return None


def refuse_cross_site_posts() -> tuple[str, int] | None:
    """Act only on posts made by the console's own pages. A page on any other site can make
    the operator's browser post a form to the console on loopback (a cross-site request
    forgery), but cannot add a header such as htmx's ``HX-Request`` without a CORS
    preflight, which the console never approves."""
    if request.method == "POST" and request.headers.get("HX-Request") != "true":
        return "refused: actions are posted by the console's own pages (HX-Request)", 403
    return None
