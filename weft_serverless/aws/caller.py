"""Who called the HTTP API, as the request context names them, for audit records.

API Gateway (REST and HTTP APIs) and function URLs put an authenticated identity in the
event's request context when the route has an authoriser (IAM, JWT, Cognito, a Lambda
authoriser); without one there is nobody to name and the caller is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_CALLER = 1000  # an audit field's limit


def caller_of(event: Mapping[str, Any]) -> str | None:
    """The caller's identity: an IAM ARN, a JWT or Cognito subject, or a Lambda authoriser's
    principal id (first found, in that order); None when the request was anonymous."""
    context = event.get("requestContext")
    if not isinstance(context, Mapping):
        return None
    authorizer = context.get("authorizer")
    identity = context.get("identity")
    candidates = [
        _path(authorizer, "iam", "userArn"),
        _path(identity, "userArn"),
        _path(authorizer, "jwt", "claims", "sub"),
        _path(authorizer, "claims", "sub"),
        _path(authorizer, "principalId"),
        _path(authorizer, "lambda", "principalId"),
    ]
    for value in candidates:
        if isinstance(value, str) and value:
            return value[:_MAX_CALLER]
    return None


def _path(value: Any, *names: str) -> Any:
    for name in names:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    return value
