"""The HTTP routes of bulk operations (dry run, confirm, list, describe): part of the one
route table."""

from __future__ import annotations

from weft_serverless.aws.route_types import Field, Route, bulk_fields
from weft_serverless.aws.schemas import ANY, NAME

BULK_ROUTES: tuple[Route, ...] = (
    *(
        Route(
            f"bulk_{kind}",
            "POST",
            f"/bulk/{kind}",
            summary,
            (200,),
            "BulkResult",
            body=(*extra, *bulk_fields(kind)),
            errors=(400, 409, 413, 500, 503),
            payload_field="payload" if extra else None,
        )
        for kind, summary, extra in (
            ("cancel", "Cancel every run the filter matches (dry run first).", ()),
            (
                "signal",
                "Signal every run the filter matches, once each (dry run first).",
                (
                    Field("name", NAME, "Signal name.", True),
                    Field("payload", ANY, "The signal's payload."),
                ),
            ),
            ("retry", "Retry every failed run the filter matches (dry run first).", ()),
        )
    ),
    Route(
        "list_bulk",
        "GET",
        "/bulk",
        "Every bulk operation (its audit record), oldest first.",
        (200,),
        "BulkPage",
        errors=(400, 500, 503),
    ),
    Route(
        "describe_bulk",
        "GET",
        "/bulk/{operation_id}",
        "A bulk operation's record: who, when, filter, counts, progress.",
        (200,),
        "BulkOperation",
    ),
    Route(
        "complete_activity",
        "POST",
        "/activities/complete",
        "Complete an asynchronous activity with its result (the token is single use).",
        (200,),
        "ActivityAccepted",
        body=(
            Field("token", {"type": "string", "minLength": 1}, "From complete_async().", True),
            Field("result", ANY, "The activity's result."),
        ),
        errors=(400, 404, 409, 413, 500, 503),
        payload_field="result",
    ),
    Route(
        "fail_activity",
        "POST",
        "/activities/fail",
        "Fail an attempt of an asynchronous activity; its retry policy decides what follows.",
        (200,),
        "ActivityAccepted",
        body=(
            Field("token", {"type": "string", "minLength": 1}, "From complete_async().", True),
            Field("message", {"type": "string"}, "What went wrong.", True),
            Field(
                "error_type",
                {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"},
                "Error type name the workflow sees (default ActivityError).",
            ),
        ),
        errors=(400, 404, 409, 500, 503),
    ),
)
