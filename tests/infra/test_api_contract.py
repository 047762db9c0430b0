"""The deployed APIs route every operation ``docs/openapi.json`` documents, and nothing else.

Both flavours are synthesised (the REST API of ``infra/app.py`` and the HTTP API stack) and
their routes read back from the templates: a REST method's path is its resource's path parts
chained by ``ParentId``, an HTTP API route is its ``RouteKey``. Every documented
``(method, path)`` must be taken by a route (``ANY`` or its method; a ``{proxy+}`` segment
takes one or more segments, a ``{name}`` segment one), or API Gateway answers it 403 or 404
before the handler could; and every route must take a documented operation, so a route left
over after an operation is removed is found too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conftest import Synth, Synthesis

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (a module named ``conftest`` is shared by several test folders,
so this file does not import it from one)."""
Route = tuple[str, str]
DOCUMENT = ROOT / "docs" / "openapi.json"
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def documented() -> list[Route]:
    """Every operation of the committed OpenAPI document, as ``(METHOD, /path)``."""
    paths: dict[str, dict[str, Any]] = json.loads(DOCUMENT.read_text())["paths"]
    return sorted(
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in HTTP_METHODS
    )


def rest_routes(synth: Synth) -> list[Route]:
    resources = synth.of_type("AWS::ApiGateway::Resource")

    def path(resource_id: dict[str, Any]) -> str:
        logical_id = resource_id.get("Ref")
        if logical_id not in resources:  # the API's root resource
            return ""
        props = resources[logical_id]["Properties"]
        return f"{path(props['ParentId'])}/{props['PathPart']}"

    return sorted(
        (m["Properties"]["HttpMethod"], path(m["Properties"]["ResourceId"]) or "/")
        for m in synth.of_type("AWS::ApiGateway::Method").values()
    )


def http_routes(synth: Synth) -> list[Route]:
    keys = (r["Properties"]["RouteKey"] for r in synth.of_type("AWS::ApiGatewayV2::Route").values())
    return sorted((key.split(" ", 1)[0], key.split(" ", 1)[1]) for key in keys)


def takes(route: Route, operation: Route) -> bool:
    """Whether API Gateway sends a request for ``operation`` down ``route``."""
    (route_method, route_path), (method, path) = route, operation
    if route_method not in ("ANY", method):
        return False
    wanted, given = route_path.strip("/").split("/"), path.strip("/").split("/")
    for index, part in enumerate(wanted):
        if part.endswith("+}"):  # greedy: the rest of the path, at least one segment
            return index == len(wanted) - 1 and len(given) > index
        if index >= len(given):
            return False
        if part.startswith("{"):
            continue
        if part != given[index]:  # a literal never takes a documented {parameter}
            return False
    return len(given) == len(wanted)


def routes_of(synthesis: Synthesis, flavour: str) -> list[Route]:
    return rest_routes(synthesis.default) if flavour == "rest" else http_routes(synthesis.http)


@pytest.mark.parametrize("flavour", ["rest", "http"])
def test_every_documented_operation_is_routed(synthesis: Synthesis, flavour: str) -> None:
    routes = routes_of(synthesis, flavour)
    unrouted = [op for op in documented() if not any(takes(r, op) for r in routes)]
    assert not unrouted, f"documented but not routed by the {flavour} API: {unrouted}"


@pytest.mark.parametrize("flavour", ["rest", "http"])
def test_every_route_serves_a_documented_operation(synthesis: Synthesis, flavour: str) -> None:
    operations = documented()
    routes = routes_of(synthesis, flavour)
    unused = [r for r in routes if not any(takes(r, op) for op in operations)]
    assert not unused, f"routed by the {flavour} API but documented nowhere: {unused}"


def test_both_flavours_route_the_same_paths(synthesis: Synthesis) -> None:
    assert routes_of(synthesis, "rest") == routes_of(synthesis, "http")


def test_the_matcher_tells_routed_from_unrouted() -> None:
    """The rule the two tests above rely on, on the cases that matter."""
    proxy = ("ANY", "/schedules/{proxy+}")
    assert takes(proxy, ("POST", "/schedules/{schedule_id}/trigger"))
    assert takes(proxy, ("GET", "/schedules/{schedule_id}"))
    assert not takes(proxy, ("GET", "/schedules"))
    assert not takes(("ANY", "/workflows/{proxy+}"), ("GET", "/workflow-counts"))
    assert not takes(("ANY", "/workflows"), ("GET", "/workflows/{workflow_id}"))
    assert not takes(("GET", "/bulk"), ("POST", "/bulk"))
    assert not takes(("ANY", "/bulk/cancel"), ("POST", "/bulk/{operation_id}"))
    assert takes(("ANY", "/bulk/{operation_id}"), ("GET", "/bulk/{operation_id}"))
