"""What ``weft dev`` accepts at its door, over real HTTP (``http.client``, so each test sets
its own headers and framing): chunked bodies as API Gateway reads them, and nothing a web
page of another site could send (a non-JSON body, a foreign ``Host`` or ``Origin``).

One ``weft dev`` subprocess serves the whole module; each test uses its own run ids.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_dev_server import DevProcess

Answer = tuple[int, Any]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dev = DevProcess(tmp_path_factory.mktemp("dev"))
    try:
        yield dev.wait_for_url()
    finally:
        assert dev.stop() == 0, "".join(dev.output)
        assert "Traceback" not in "".join(dev.output)


def send(
    base: str,
    method: str,
    path: str,
    body: bytes | Iterable[bytes] | None = None,
    headers: dict[str, str] | None = None,
    *,
    chunked: bool = False,
) -> Answer:
    """One request; the answer's status and JSON body."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=20)
    try:
        connection.request(method, path, body, headers or {}, encode_chunked=chunked)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def start(base: str, run_id: str) -> None:
    body = json.dumps({"workflow_type": "order", "id": run_id, "input": _order()}).encode()
    status, answer = send(base, "POST", "/workflows", body, {"Content-Type": "application/json"})
    assert (status, answer["status"]) == (201, "running"), answer


def status_of(base: str, run_id: str) -> str:
    status, answer = send(base, "GET", f"/workflows/{run_id}")
    assert status == 200, answer
    return str(answer["status"])


def test_a_chunked_body_is_read_as_a_whole(base: str) -> None:
    body = json.dumps({"workflow_type": "order", "id": "chunked-1", "input": _order()}).encode()
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]  # many small chunks
    status, answer = send(
        base,
        "POST",
        "/workflows",
        iter(pieces),
        {"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        chunked=True,
    )
    assert (status, answer["id"], answer["status"]) == (201, "chunked-1", "running"), answer


def test_a_chunked_body_over_the_limit_is_the_apis_413(base: str) -> None:
    from weft_serverless.aws.route_types import MAX_BODY_BYTES

    big = json.dumps({"workflow_type": "order", "input": "x" * MAX_BODY_BYTES}).encode()
    pieces = [big[i : i + 65536] for i in range(0, len(big), 65536)]
    status, answer = send(
        base,
        "POST",
        "/workflows",
        iter(pieces),
        {"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        chunked=True,
    )
    assert (status, answer["code"]) == (413, "PayloadTooLargeError"), answer


def test_a_body_that_is_not_json_is_refused_before_the_handler(base: str) -> None:
    """A page of any site can post ``text/plain`` without a CORS preflight."""
    start(base, "plain-1")
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {} if content_type is None else {"Content-Type": content_type}
        status, answer = send(base, "POST", "/workflows/plain-1/cancel", b"{}", headers)
        assert (status, answer["code"]) == (415, "UnsupportedMediaType"), answer
        assert "send Content-Type: application/json" in answer["message"]
    assert status_of(base, "plain-1") == "running"
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        status, answer = send(
            base, "POST", "/workflows/plain-1/signals/noise", b"{}", {"Content-Type": content_type}
        )
        assert status == 200, answer
    # a bodyless POST needs no type: it is what curl sends for a query or a cancel
    assert send(base, "POST", "/workflows/plain-1/cancel")[0] == 200


def test_a_foreign_host_name_is_refused(base: str) -> None:
    """DNS rebinding: a site re-pointed at 127.0.0.1 is same-origin for the browser, but its
    requests carry its own name as Host."""
    start(base, "host-1")
    json_type = {"Content-Type": "application/json"}
    for host in ("attacker.example", "attacker.example:8080", "127.0.0.1.nip.io"):
        status, answer = send(
            base, "POST", "/workflows/host-1/cancel", b"{}", {**json_type, "Host": host}
        )
        assert (status, answer["code"]) == (403, "HostNotAllowed"), answer
        assert "is not a loopback name" in answer["message"]
        status, answer = send(base, "GET", "/workflows/host-1", headers={"Host": host})
        assert status == 403, answer
    assert status_of(base, "host-1") == "running"
    port = urlsplit(base).port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert send(base, "GET", "/workflows/host-1", headers={"Host": host})[0] == 200


def test_a_page_of_another_site_is_refused(base: str) -> None:
    """The attack it stops: a cross-site page cancelling a run (no preflight needed for
    a bodyless or ``text/plain`` POST); refused by its Origin even with a JSON type."""
    start(base, "origin-1")
    for origin in ("https://attacker.example", "null", "http://localhost.attacker.example"):
        for body, headers in (
            (None, {"Origin": origin}),
            (b"{}", {"Origin": origin, "Content-Type": "application/json"}),
        ):
            status, answer = send(base, "POST", "/workflows/origin-1/cancel", body, headers)
            assert (status, answer["code"]) == (403, "OriginNotAllowed"), answer
    assert status_of(base, "origin-1") == "running"
    port = urlsplit(base).port
    for origin in (f"http://127.0.0.1:{port}", "http://localhost:3000", "http://[::1]"):
        assert send(base, "GET", "/workflows/origin-1", headers={"Origin": origin})[0] == 200


def test_a_content_length_that_is_not_a_number_is_a_json_400(base: str) -> None:
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=20)
    try:
        connection.putrequest("POST", "/workflows")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", "ten")
        connection.endheaders()
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert (response.status, answer["code"]) == (400, "InvalidContentLength"), answer


def _order() -> dict[str, object]:
    from examples.order import SAMPLE_ORDER

    return dict(SAMPLE_ORDER)
