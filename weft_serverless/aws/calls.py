"""Carry out one API operation by name, for every front end: the HTTP API, ``weft`` and the
console.

Each operation is defined once: its fields in the route table, its work in an operations
module. A front end only turns its own input (an API Gateway event, a command line, a form)
into path parameters, query and body, and the answer back into its own output, so the three
cannot disagree on what a field means or which inputs are refused.

Every call runs in an invocation scope: the Lambda handler's own, or, for a local caller, one
opened here around the operation. An operation that wakes a run drives it inline on the
caller's engine, which claims it; the scope releases what is parked when the call returns, so
a console that lives on (or any operator engine) never keeps a run from its application.

Errors propagate: ``ApiError`` for a refused input (already naming its field), the engine's
``WeftError`` otherwise; ``responses.error_of`` gives either's status and body.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from weft_serverless import Engine
from weft_serverless.aws import bulk_operations, operations, schedule_operations
from weft_serverless.aws.operations import Reply, Request, Scope
from weft_serverless.aws.route_types import Route
from weft_serverless.aws.routes import ROUTES
from weft_serverless.aws.validation import check_body, check_path_param, parse_query

ROUTE_OF: dict[str, Route] = {route.operation: route for route in ROUTES}
"""Each route by its operation name (``start_workflow``, ``retry_workflow``, ...)."""


class LocalScope:
    """A caller outside Lambda (the CLI, the console): no deadline and no log keys to bind.

    Its engine-side scope (``Engine.invocation``, as ``lambda_invocation`` opens it) is opened
    by ``call`` around each operation.
    """

    def time_left(self) -> float:
        return math.inf

    def bind(self, **keys: Any) -> None:
        del keys


def implementation(operation: str) -> Callable[[Request], Reply]:
    """The function carrying out ``operation``: in the run, schedule or bulk module."""
    for module in (operations, schedule_operations, bulk_operations):
        found: Callable[[Request], Reply] | None = getattr(module, operation, None)
        if found is not None:
            return found
    raise LookupError(f"no operation {operation!r}")


def call(
    engine: Engine,
    operation: str,
    *,
    params: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    body: Mapping[str, Any] | None = None,
    caller: str | None = None,
    actor: str | None = None,
    scope: Scope | None = None,
    reserve: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> Reply:
    """Validate the inputs of ``operation`` as the route table says, then carry it out.

    Args:
        engine: The engine to act through.
        operation: A ``Route.operation``.
        params: Path parameters, decoded (``workflow_id``, ``name``, ...).
        query: Query fields, as URL text or already typed.
        body: The decoded body; ``None`` for a route without one.
        caller: Who asks, authenticated, for audit records (bulk operations).
        actor: Who asks, as the front end names them (``weft --actor``), for the same
            records; the engine's id when absent.
        scope: The invocation's time budget and log keys, from a caller that already runs
            the engine in an invocation scope (``lambda_invocation``); without it the
            operation runs in one opened here, which releases what it claimed.
        reserve: Seconds a bounded wait leaves the invocation.
        sleep: Pause between polls while waiting for a result.
        monotonic: Clock for that wait.

    Returns:
        ``(status, JSON-able body)``, as the HTTP API answers.
    """
    route = ROUTE_OF.get(operation)
    if route is None:
        raise LookupError(f"no operation {operation!r}")
    checked = {name: check_path_param(name, value) for name, value in (params or {}).items()}
    missing = [name for name in route.path_params if name not in checked]
    if missing:
        raise LookupError(f"{operation} needs path parameters {missing}")
    in_scope = scope if scope is not None else LocalScope()
    if "workflow_id" in checked:
        in_scope.bind(workflow_id=checked["workflow_id"])
    request = Request(
        engine=engine,
        invocation=in_scope,
        params=checked,
        query=parse_query(query, route),
        body=check_body(body or {}, route) if route.body is not None else {},
        reserve=reserve,
        sleep=sleep,
        monotonic=monotonic,
        caller=caller,
        actor=actor,
    )
    carry_out = implementation(operation)
    if scope is not None:
        return carry_out(request)
    with engine.invocation(heartbeat=True):
        return carry_out(request)
