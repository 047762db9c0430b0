"""The document is never looser than the server (ADR 0041): what it allows, the server takes.

Each narrowing the document adds where JSON Schema cannot say the server's rule (a byte limit
as a pattern, a duration or an instant written as text, a tag) is checked by generating
strings from the document's own pattern and handing them to the server's check; fields the
server refuses together are refused by the document too; the correlation header is used as
the document says.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from aws_support import Api
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from weft_serverless.aws import ROUTES, openapi_document
from weft_serverless.aws.operations import _instant as read_instant
from weft_serverless.aws.route_types import BULK_FILTERS, PATH_PARAMETERS
from weft_serverless.aws.schemas import MAX_BYTES, documented
from weft_serverless.aws.validation import check_value
from weft_serverless.engine.bulk.request import filter_names
from weft_serverless.identifiers import NON_PRINTABLE, is_printable
from weft_serverless.search_attributes import check_tags
from weft_serverless.time_values import MAX_DURATION, MAX_INSTANT, parse_duration, parse_instant

FIELDS = {
    (route.operation, field.name): field
    for route in ROUTES
    for field in (*(route.body or ()), *route.query)
} | {("path", name): field for name, field in PATH_PARAMETERS.items()}
BYTE_LIMITED = sorted(key for key, field in FIELDS.items() if MAX_BYTES in field.schema)
WITH_TEXT_FORM = sorted(
    key
    for key, field in FIELDS.items()
    if "string" in field.schema.get("type", ()) and "number" in field.schema.get("type", ())
)
SOME = settings(max_examples=40, deadline=None, database=None)


def _is_calendar_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _doc_pattern(key: tuple[str, str]) -> str:
    pattern = documented(FIELDS[key].schema).get("pattern")
    assert isinstance(pattern, str), f"{key} documents no pattern"
    return pattern


def test_every_limited_or_two_form_field_is_covered() -> None:
    """The properties below run over these fields: ids, names, dedup ids, durations, instants."""
    assert ("start_workflow", "id") in BYTE_LIMITED
    assert ("path", "schedule_id") in BYTE_LIMITED
    assert ("start_workflow", "start_at") in WITH_TEXT_FORM
    assert ("create_schedule", "every") in WITH_TEXT_FORM


@pytest.mark.parametrize("key", BYTE_LIMITED, ids="-".join)
@SOME
@given(data=st.data())
def test_a_string_the_document_allows_fits_the_byte_limit(key: Any, data: Any) -> None:
    field = FIELDS[key]
    value = data.draw(st.from_regex(_doc_pattern(key), fullmatch=True))
    assert len(value) <= documented(field.schema)["maxLength"]
    check_value(field.name, field.schema, value)  # raises an ApiError if the server refuses


@pytest.mark.parametrize("key", WITH_TEXT_FORM, ids="-".join)
@SOME
@given(data=st.data())
def test_a_duration_or_instant_text_the_document_allows_is_read_in_bounds(
    key: Any, data: Any
) -> None:
    schema = documented(FIELDS[key].schema)
    text = data.draw(st.from_regex(schema["pattern"], fullmatch=True))
    if schema.get("format") == "date-time":
        assume(_is_calendar_date(text[:10]))  # format date-time: the pattern alone allows 02-30
        assert 0 <= parse_instant(read_instant(text, "at"), "at") <= MAX_INSTANT  # as the API reads
    else:
        seconds = parse_duration(text)
        assert seconds <= MAX_DURATION
        assert seconds >= schema.get("minimum", 0)
        assert seconds > schema.get("exclusiveMinimum", -1)


TAG_ITEMS = documented(FIELDS[("start_workflow", "tags")].schema)["items"]["pattern"]


@SOME
@given(tags=st.lists(st.from_regex(TAG_ITEMS, fullmatch=True), max_size=10))
def test_tags_the_document_allows_are_taken(tags: list[str]) -> None:
    assert check_tags(tags) == list(dict.fromkeys(tags))  # taken, repeats once


@SOME
@given(text=st.text(max_size=8))
def test_printable_is_one_class_in_the_engine_and_the_document(text: str) -> None:
    """An id the document allows is printable to the engine, and a short printable one is
    allowed by the document (the same class, ``NON_PRINTABLE``, on both sides)."""
    allowed = re.fullmatch(_doc_pattern(("path", "workflow_id")), text) is not None
    assert allowed == is_printable(text)
    assert is_printable(text) == (bool(text) and not re.search(f"[{NON_PRINTABLE}]", text))


def _request_schema(path: str, method: str) -> Draft202012Validator:
    operation = openapi_document()["paths"][path][method]
    return Draft202012Validator(operation["requestBody"]["content"]["application/json"]["schema"])


def test_fields_the_server_refuses_together_the_document_refuses(api: Api) -> None:
    start = _request_schema("/workflows", "post")
    both = {"workflow_type": "greeter", "start_at": 2e9, "start_after": 60}
    assert not start.is_valid(both)
    assert api("POST", "/workflows", both).status == 400
    assert start.is_valid({"workflow_type": "greeter", "start_after": 60})

    schedule = _request_schema("/schedules", "post")
    base = {"schedule_id": "s", "workflow_type": "greeter"}
    for body in ({**base}, {**base, "cron": "* * * * *", "every": 60}):
        assert not schedule.is_valid(body), body
        assert api("POST", "/schedules", body).status == 400, body
    assert schedule.is_valid({**base, "every": 60})


def test_the_correlation_header_is_used_as_the_document_says(api: Api) -> None:
    document = openapi_document()["components"]
    assert "1 to 128 printable ASCII" in document["parameters"]["CorrelationId"]["description"]
    pattern = document["headers"]["CorrelationId"]["schema"]["pattern"]
    used = api("GET", "/workflows", headers={"X-Correlation-Id": "c" * 128})
    assert used.headers["X-Correlation-Id"] == "c" * 128
    ignored = api("GET", "/workflows", headers={"X-Correlation-Id": "c" * 129})
    assert ignored.status == 200
    assert ignored.headers["X-Correlation-Id"] != "c" * 129
    assert re.fullmatch(pattern, ignored.headers["X-Correlation-Id"])


def test_a_bulk_filter_documents_every_filter_the_engine_takes() -> None:
    """The keys a bulk ``filter`` may hold are the listing's filters, no more and no fewer
    (a filter added to the engine must be documented and let through)."""
    assert set(BULK_FILTERS) == filter_names()
