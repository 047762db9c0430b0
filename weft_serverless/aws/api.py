"""The API handler: the route table wired to the engine through powertools' resolvers.

One handler serves every event shape that can front it: an API Gateway REST API (proxy
payload 1.0), an API Gateway HTTP API (payload 2.0) and a Lambda function URL (also 2.0).
The shape is read from each event, so the same function can sit behind any of them (and
move from one to another) without a redeploy of code; see docs/decisions/0016.

Requests are validated against the route table before the engine is called, so a rejected
request writes nothing. Engine errors map to statuses in ``responses``; anything unexpected
is a 500 whose body reveals nothing (the stack goes to the log, under the correlation id).
"""

from __future__ import annotations

import contextvars
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from weft_serverless import Engine
from weft_serverless.aws import calls
from weft_serverless.aws.caller import caller_of
from weft_serverless.aws.context import LambdaContext
from weft_serverless.aws.logs import get_logger
from weft_serverless.aws.responses import ApiError, error_of, to_json
from weft_serverless.aws.route_types import MAX_BODY_BYTES, MAX_CORRELATION_ID, Route
from weft_serverless.aws.routes import ROUTES
from weft_serverless.aws.runtime import get_engine, seconds_from_env
from weft_serverless.aws.scope import DEFAULT_STEP_RESERVE, Invocation, lambda_invocation
from weft_serverless.aws.validation import read_body

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response
    from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver

Event = dict[str, Any]
LambdaHandler = Callable[[Event, LambdaContext], dict[str, Any]]

STEP_RESERVE_ENV = "WEFT_STEP_RESERVE_SECONDS"
CORRELATION_HEADER = "X-Correlation-Id"
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class _Current:
    engine: Engine
    invocation: Invocation
    event: Event
    shape: str


def make_api_handler(
    *,
    engine_factory: Callable[[], Engine] = get_engine,
    step_reserve: float | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> LambdaHandler:
    """Build the Lambda handler for the API (``handlers/api.py`` holds one at module level).

    The engine comes from ``engine_factory`` on each invocation (cached per container by
    ``get_engine``). ``sleep`` and ``monotonic`` pace the bounded wait for a result, so
    tests can drive it without waiting.

    Args:
        engine_factory: Returns the container's engine.
        step_reserve: Least seconds a step may start with; ``WEFT_STEP_RESERVE_SECONDS``.
        max_body_bytes: Larger request bodies get a 413 before they are parsed.
        sleep: Pause between polls while waiting for a result.
        monotonic: Clock for that wait.
    """
    get_logger()  # powertools loads now, in Lambda's init phase, not in the first invocation
    reserve = (
        step_reserve
        if step_reserve is not None
        else seconds_from_env(STEP_RESERVE_ENV, DEFAULT_STEP_RESERVE)
    )
    current: contextvars.ContextVar[_Current] = contextvars.ContextVar("weft_api_current")
    views = [
        (route, _view(route, current, reserve, max_body_bytes, sleep, monotonic))
        for route in ROUTES
    ]
    resolvers = {shape: _resolver(shape, views) for shape in SHAPES}

    def handler(event: Event, context: LambdaContext) -> dict[str, Any]:
        shape = event_shape(event)
        app = resolvers[shape]
        engine = engine_factory()
        started = monotonic()
        with lambda_invocation(
            engine,
            context,
            handler="api",
            step_reserve=reserve,
            correlation_id=_correlation_id(event, context),
        ) as invocation:
            token = current.set(_Current(engine, invocation, event, shape))
            try:
                response = app.resolve(event, cast(Any, context))
            finally:
                current.reset(token)
            _add_header(response, CORRELATION_HEADER, invocation.correlation_id)
            invocation.logger.info(
                "request",
                extra={
                    "http_method": _method_of(event),
                    "path": _path_of(event),
                    "status": response.get("statusCode"),
                    "duration_ms": round((monotonic() - started) * 1000, 1),
                },
            )
        return response

    return handler


REST, HTTP, FUNCTION_URL = "rest", "http", "function-url"
SHAPES = (REST, HTTP, FUNCTION_URL)


def event_shape(event: Event) -> str:
    """Which front door sent ``event``: a REST API (1.0), an HTTP API or a function URL (2.0).

    Payload 2.0 carries ``version: "2.0"`` and ``requestContext.http``; a function URL's
    domain is ``<id>.lambda-url.<region>.on.aws``. Anything else is read as a REST event,
    as before, so existing callers keep working.
    """
    context = event.get("requestContext") or {}
    if event.get("version") != "2.0" or not isinstance(context.get("http"), Mapping):
        return REST
    return FUNCTION_URL if ".lambda-url." in str(context.get("domainName", "")) else HTTP


def _method_of(event: Event) -> Any:
    http = (event.get("requestContext") or {}).get("http")
    return http.get("method") if isinstance(http, Mapping) else event.get("httpMethod")


def _path_of(event: Event) -> Any:
    return event.get("rawPath") if "rawPath" in event else event.get("path")


def _resolver(
    shape: str, views: list[tuple[Route, Callable[..., Response[str]]]]
) -> ApiGatewayResolver:
    from aws_lambda_powertools.event_handler import (
        APIGatewayHttpResolver,
        APIGatewayRestResolver,
        LambdaFunctionUrlResolver,
    )

    kinds: dict[str, type[ApiGatewayResolver]] = {
        REST: APIGatewayRestResolver,
        HTTP: APIGatewayHttpResolver,
        FUNCTION_URL: LambdaFunctionUrlResolver,
    }
    app = kinds[shape]()
    for route, view in views:
        app.route(rule=route.resolver_rule, method=route.method)(view)
    app.not_found(_not_found(app))
    return app


def _view(
    route: Route,
    current: contextvars.ContextVar[_Current],
    reserve: float,
    max_body_bytes: int,
    sleep: Callable[[float], None],
    monotonic: Callable[[], float],
) -> Callable[..., Response[str]]:
    def view(**path: str) -> Response[str]:
        state = current.get()
        allowed = allowed_methods(re.sub(r"{(\w+)}", lambda m: path[m.group(1)], route.path))
        if allowed and route.method not in allowed:  # a more specific path holds the request
            return _method_not_allowed(route.path, allowed)
        try:
            encoded = state.shape != HTTP
            status, payload = calls.call(
                state.engine,
                route.operation,
                params={name: _decoded(value, encoded) for name, value in path.items()},
                query=state.event.get("queryStringParameters"),
                body=(
                    read_body(
                        state.event.get("body"),
                        bool(state.event.get("isBase64Encoded")),
                        max_body_bytes,
                    )
                    if route.body is not None
                    else None
                ),
                caller=caller_of(state.event),
                scope=state.invocation,
                reserve=reserve,
                sleep=sleep,
                monotonic=monotonic,
            )
        except Exception as exc:
            error = error_of(exc, route.payload_field)
            if error.status >= 500:
                state.invocation.logger.exception(f"{route.operation} failed: {error.code}")
            return _error_response(error)
        return _json_response(status, payload)

    view.__name__ = route.operation
    return view


def _not_found(app: ApiGatewayResolver) -> Callable[[Exception], Response[str]]:
    """404 for an unknown path; 405 (with ``Allow``) for a known path and another method."""

    def not_found(_: Exception) -> Response[str]:
        path = app.current_event.path
        allowed = allowed_methods(path)
        if allowed:
            return _method_not_allowed(path, allowed)
        return _error_response(ApiError(404, "NotFound", f"no route for {path}"))

    return not_found


def _method_not_allowed(path: str, allowed: list[str]) -> Response[str]:
    error = ApiError(405, "MethodNotAllowed", f"{path} accepts {', '.join(allowed)}")
    return _error_response(error, {"Allow": ", ".join(allowed)})


def allowed_methods(path: str) -> list[str]:
    """The methods the document gives ``path``: those of the route templates it matches with
    the most literal segments, as OpenAPI matches a concrete path before a templated one, so
    ``/bulk/cancel`` takes POST only, not also the GET of ``/bulk/{operation_id}``."""
    matching = [route for route in ROUTES if _template_matches(route.path, path)]
    if not matching:
        return []
    best = max(_literal_segments(route.path) for route in matching)
    return sorted({r.method for r in matching if _literal_segments(r.path) == best})


def _literal_segments(template: str) -> int:
    return sum(not part.startswith("{") for part in template.strip("/").split("/"))


def _template_matches(template: str, path: str) -> bool:
    parts, wanted = path.strip("/").split("/"), template.strip("/").split("/")
    return len(parts) == len(wanted) and all(
        w.startswith("{") or w == p for w, p in zip(wanted, parts, strict=True)
    )


def _decoded(raw: str, encoded: bool) -> str:
    """REST APIs and function URLs pass the path still percent-encoded: decode each parameter
    once. An HTTP API has decoded ``rawPath`` already; decoding again would turn a literal
    ``%41`` in an id into ``A``."""
    return urllib.parse.unquote(raw) if encoded else raw


def _correlation_id(event: Event, context: LambdaContext) -> str:
    """The caller's ``X-Correlation-Id`` when sane, else API Gateway's request id."""
    headers: Mapping[str, str] = event.get("headers") or {}
    for name, value in headers.items():
        if name.lower() == CORRELATION_HEADER.lower() and _usable_id(value):
            return value
    request_id = (event.get("requestContext") or {}).get("requestId")
    if isinstance(request_id, str) and _usable_id(request_id):
        return request_id
    return context.aws_request_id or uuid.uuid4().hex


def _usable_id(value: Any) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_CORRELATION_ID
        and value.isascii()
        and value.isprintable()
    )


def _json_response(
    status: int, payload: Any, headers: Mapping[str, str] | None = None
) -> Response[str]:
    from aws_lambda_powertools.event_handler import Response

    return Response(status_code=status, content_type=JSON, body=to_json(payload), headers=headers)


def _error_response(error: ApiError, headers: Mapping[str, str] | None = None) -> Response[str]:
    return _json_response(error.status, error.body(), headers)


def _add_header(response: dict[str, Any], name: str, value: str) -> None:
    if "multiValueHeaders" in response:
        response["multiValueHeaders"][name] = [value]
    else:
        response.setdefault("headers", {})[name] = value
