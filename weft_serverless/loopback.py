"""Who may talk to a local tool (``weft dev``, ``weft console``) bound to loopback.

Neither tool has authentication: binding to loopback keeps other machines out, and these
checks keep web pages out. A page on any site can make the operator's browser send requests
to loopback; a site whose name an attacker re-points at 127.0.0.1 (DNS rebinding) is even
same-origin for the browser. Such requests still name the site: in ``Host`` (its own name)
and in ``Origin`` (the page that sent them), so a tool answers only loopback names in both.
"""

from __future__ import annotations

from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
"""The names a tool bound to loopback answers to."""


def host_name(host: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8484`` is ``::1``."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    return host.rsplit(":", 1)[0].lower()


def origin_name(origin: str) -> str | None:
    """The host name of an ``Origin`` header; None for ``null`` or anything not a URL."""
    try:
        name = urlsplit(origin.strip()).hostname
    except ValueError:
        return None
    return name.lower() if name else None


def foreign_origin(origin: str | None, host: str) -> bool:
    """Whether a request was sent by a page of another site than loopback or ``host``.

    No ``Origin`` at all is a client that is not a browser page (curl, the SDKs), or a
    browser's own navigation, which a page cannot make carry a body.
    """
    if origin is None:
        return False
    name = origin_name(origin)
    return name is None or (name not in LOOPBACK_NAMES and name != host_name(host))
