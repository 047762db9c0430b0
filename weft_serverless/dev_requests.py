"""What ``weft dev`` accepts at its door, and what of a request goes into the API Gateway event
(its body, headers and target, as API Gateway passes them).

Deployed, API Gateway authenticates every request (IAM) and reads every body, whether it has
a ``Content-Length`` or comes in chunks. ``weft dev`` has no authentication, so it answers
only what a web page cannot send it: a page on another site can make the browser send a
``text/plain`` or form body without a CORS preflight, but not a JSON one, and its requests
name the site in ``Origin`` and, after DNS rebinding, in ``Host`` (``loopback``). Refusals are
JSON error bodies like the API's (``code``, ``message``), and nothing reaches the handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weft_serverless.loopback import LOOPBACK_NAMES, foreign_origin, host_name

JSON_TYPES = ("application/json",)
"""Media types a body may have; ``+json`` suffixes (``application/merge-patch+json``) too."""


class Refused(Exception):
    """A request the dev server answers itself: its status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def check_sender(environ: Mapping[str, Any], loopback_only: bool) -> None:
    """Refuse a request addressed to another name than loopback (when bound to loopback),
    or sent by a page of another site."""
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
    if loopback_only and host_name(host) not in LOOPBACK_NAMES:
        raise Refused(
            403,
            "HostNotAllowed",
            f"Host {host!r} is not a loopback name: weft dev answers "
            f"{', '.join(sorted(LOOPBACK_NAMES))} only (a page of another site, re-pointed "
            "at 127.0.0.1, would name itself here); open it as http://127.0.0.1:PORT",
        )
    origin = environ.get("HTTP_ORIGIN")
    if foreign_origin(None if origin is None else str(origin), host):
        raise Refused(
            403,
            "OriginNotAllowed",
            f"Origin {origin!r} is a page of another site: weft dev has no authentication, "
            "so it answers no web page but its own host's; call it from a shell or a program",
        )


def read_body(environ: Mapping[str, Any], limit: int) -> bytes:
    """The request's body, ``Content-Length`` or chunked, at most ``limit + 1`` bytes (the
    handler answers 413 above ``limit``, as API Gateway's Lambda would)."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):  # chunked: the server de-chunks to the end
        wanted = limit + 1
    else:
        text = str(environ.get("CONTENT_LENGTH") or "0").strip()
        if not text.isdigit():
            raise Refused(
                400,
                "InvalidContentLength",
                f"Content-Length {text!r} is not a number of bytes; send the body's length, "
                "or send it chunked (Transfer-Encoding: chunked)",
            )
        wanted = min(int(text), limit + 1)
    parts: list[bytes] = []
    read = 0
    while read < wanted:
        part = stream.read(wanted - read)
        if not part:
            break
        parts.append(part)
        read += len(part)
    return b"".join(parts)


def check_body_type(environ: Mapping[str, Any], body: bytes) -> None:
    """Refuse a body that is not JSON by its ``Content-Type`` (every route takes JSON)."""
    if not body:
        return
    declared = str(environ.get("CONTENT_TYPE") or "")
    media = declared.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES or media.endswith("+json"):
        return
    said = f"is {declared!r}" if declared else "is missing"
    raise Refused(
        415,
        "UnsupportedMediaType",
        f"the body's Content-Type {said}; every route takes JSON: send "
        "Content-Type: application/json (curl: -H 'content-type: application/json')",
    )


def headers(environ: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The request's headers from a WSGI environ, in the spelling clients send."""
    found = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            name = key[5:]
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            name = key
        else:
            continue
        found.append(("-".join(part.capitalize() for part in name.split("_")), str(value)))
    return found


def target(environ: Mapping[str, Any]) -> str:
    """The request target as sent (still percent-encoded), as API Gateway passes the path."""
    raw = environ.get("REQUEST_URI") or environ.get("RAW_URI")
    if raw:
        return str(raw)
    from urllib.parse import quote

    query = environ.get("QUERY_STRING")
    return quote(str(environ.get("PATH_INFO") or "/")) + (f"?{query}" if query else "")
