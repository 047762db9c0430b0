"""What each bulk-operation route does, given a validated request (see ``operations``)."""

from __future__ import annotations

from typing import Any

from weft_serverless import BulkOperation, BulkPreview
from weft_serverless.aws.operations import Reply, Request
from weft_serverless.aws.responses import bad_request
from weft_serverless.aws.route_types import BULK_FILTERS


def bulk_json(result: BulkPreview | BulkOperation) -> dict[str, Any]:
    """A dry run (``BulkPreview``) or an operation's record (``BulkOperation``)."""
    if isinstance(result, BulkPreview):
        return {
            "kind": result.kind,
            "count": result.count,
            "token": result.token,
            "expires_at": result.expires_at,
            "filter": result.filters,
        }
    fields = result.as_dict()
    fields["filter"] = fields.pop("filters")
    return fields


def _bulk_options(request: Request) -> dict[str, Any]:
    body = request.body
    filters = body.get("filter") or {}
    if not isinstance(filters, dict):
        raise bad_request("filter", "must be an object of list filters")
    for name in filters:  # else a key such as "page_size" would reach the call as an option
        if name not in BULK_FILTERS:
            raise bad_request(name, f"is not a filter; a filter takes {', '.join(BULK_FILTERS)}")
    options = {
        name: body[name] for name in ("dry_run", "confirm", "reason", "page_size") if name in body
    }
    return {**filters, **options, "caller": request.caller, "actor": request.actor}


def bulk_cancel(request: Request) -> Reply:
    return 200, bulk_json(request.engine.cancel_all(**_bulk_options(request)))


def bulk_signal(request: Request) -> Reply:
    body = request.body
    result = request.engine.signal_all(body["name"], body.get("payload"), **_bulk_options(request))
    return 200, bulk_json(result)


def bulk_retry(request: Request) -> Reply:
    return 200, bulk_json(request.engine.retry_failed_all(**_bulk_options(request)))


def list_bulk(request: Request) -> Reply:
    return 200, {"items": [bulk_json(op) for op in request.engine.list_bulk_operations()]}


def describe_bulk(request: Request) -> Reply:
    return 200, bulk_json(request.engine.describe_bulk(request.params["operation_id"]))
