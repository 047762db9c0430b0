"""Run the engine on AWS Lambda: an invocation scope and the handlers built on it.

``handlers/api.py``, ``handlers/maintenance.py`` and ``handlers/timers.py`` are one line
each on top of this package. Importing it is cheap: powertools and boto3 load when a handler
is built or first invoked, never at ``import weft_serverless``. See ``docs/aws-runtime.md``.
"""

from typing import Any

from weft_serverless.aws.api import make_api_handler
from weft_serverless.aws.context import LambdaContext, LocalContext
from weft_serverless.aws.logs import get_logger
from weft_serverless.aws.maintenance import make_maintenance_handler
from weft_serverless.aws.route_types import Route
from weft_serverless.aws.routes import ROUTES
from weft_serverless.aws.runtime import build_engine, get_engine, load_workflows, reset_engine
from weft_serverless.aws.scope import Invocation, lambda_invocation
from weft_serverless.aws.timers import make_timer_hint_handler

__all__ = [
    "ROUTES",
    "Invocation",
    "LambdaContext",
    "LocalContext",
    "Route",
    "build_engine",
    "get_engine",
    "get_logger",
    "lambda_invocation",
    "load_workflows",
    "make_api_handler",
    "make_maintenance_handler",
    "make_timer_hint_handler",
    "openapi_document",
    "reset_engine",
]


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI 3.1 document (``docs/openapi.json`` is its committed copy)."""
    # Imported here so ``python -m weft_serverless.aws.openapi`` runs a fresh module.
    from weft_serverless.aws.openapi import document

    return document()
