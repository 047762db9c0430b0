"""Serve the console's WSGI app with Werkzeug's threaded server, on loopback by default.

The console is a local tool for one operator: Werkzeug (already Flask's own dependency) is
enough, and binding to loopback keeps it off the network unless ``--host`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server


def bind(app: Flask, host: str = "127.0.0.1", port: int = 0) -> BaseWSGIServer:
    """A server for ``app`` on ``host:port`` (0: any free port), not yet serving."""
    return make_server(host, port, app, threaded=True)


def url_of(server: BaseWSGIServer) -> str:
    """The address to open in a browser."""
    host = server.host if server.host not in ("0.0.0.0", "::") else "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{server.port}/"


def serve(server: BaseWSGIServer, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; ``on_ready`` gets the URL first."""
    if on_ready is not None:
        on_ready(url_of(server))
    try:
        server.serve_forever()
    finally:
        server.server_close()
