"""The runs page's filter form turned into the query of GET /workflows, and back into links.

The form carries what an operator types (a start-time window as ``datetime-local`` text);
the API takes epoch seconds. Only that conversion happens here: every field is then checked
by the route table through ``calls.call``, so the page refuses exactly what the API refuses.
Links (status chips, next page, the live fragment) carry the form's own text, so the form
shows what was typed on every page.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from weft_serverless.aws.responses import ApiError, bad_request

FORM_FIELDS = (
    "status",
    "type_prefix",
    "workflow_type",
    "where",
    "tags",
    "started_after",
    "started_before",
    "id_prefix",
    "order",
    "limit",
)
"""The list filters of GET /workflows that the form offers, in the form's order."""
TIME_FIELDS = ("started_after", "started_before")
DEFAULT_LIMIT = "50"
"""A page of 50 rows: enough to scan, small enough to render and refresh every 2 s."""
MAX_TRAIL = 50
"""Pages a Previous link can walk back; further back, the First page link remains."""


@dataclass(frozen=True, slots=True)
class RunFilters:
    """The form's fields as typed (empty ones left out), the page's cursor, and the cursors
    of the pages before it (``back``, oldest first; ``""`` is the first page). A cursor
    reads forward only, so the way back is carried in the links themselves."""

    form: dict[str, str]
    cursor: str | None = None
    back: tuple[str, ...] = ()

    def list_query(self) -> dict[str, str | float]:
        """The query of ``list_workflows``: the form with times as epoch seconds."""
        query = _api_query(self.form, FORM_FIELDS)
        query.setdefault("limit", DEFAULT_LIMIT)
        if self.cursor is not None:
            query["cursor"] = self.cursor
        return query

    def shown(self, name: str) -> str:
        """A field's value for the form: a start-time bound as ``datetime-local`` text (UTC)."""
        text = self.form.get(name, "")
        if name not in TIME_FIELDS or not text:
            return text
        try:
            epoch = epoch_seconds(name, text)
        except ApiError:
            return text
        moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S")

    def link(self, *, back: Sequence[str] | None = None, **changes: str | None) -> str:
        """This page's query string with ``changes`` (``None`` drops a field), cursor and
        way back included unless changed: ``?status=failed&limit=50``. A link to another
        cursor or filter starts a new way back unless ``back`` is given."""
        fields: dict[str, str | None] = {**self.form, "cursor": self.cursor, **changes}
        kept = [(name, value) for name, value in fields.items() if value]
        trail = self.back if back is None and not changes else (back or ())
        kept += [("back", cursor) for cursor in trail[-MAX_TRAIL:]]
        return "?" + urlencode(kept) if kept else "?"

    def next_link(self, next_cursor: str) -> str:
        """The next page's query string: this page joins the way back."""
        return self.link(cursor=next_cursor, back=(*self.back, self.cursor or ""))

    def previous_link(self) -> str | None:
        """The previous page's query string, when the way back is known."""
        if not self.back:
            return None
        return self.link(cursor=self.back[-1] or None, back=self.back[:-1])


def parse(args: Mapping[str, str], back: Sequence[str] = ()) -> RunFilters:
    """The filters in a request's query string; blank fields are absent filters. ``back``
    is its ``back`` values (``request.args.getlist("back")``)."""
    form = {name: args[name].strip() for name in FORM_FIELDS if args.get(name, "").strip()}
    cursor = args.get("cursor", "").strip() or None
    return RunFilters(form, cursor, tuple(back)[-MAX_TRAIL:] if cursor else ())


def epoch_seconds(name: str, text: str) -> float:
    """A ``datetime-local`` value (``2026-12-02T05:40``, read as UTC like every time the
    console shows) or epoch seconds, as epoch seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise bad_request(
            name, f"must be a date and time (2026-12-02T05:40, UTC) or epoch seconds, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _api_query(form: Mapping[str, str], fields: tuple[str, ...]) -> dict[str, str | float]:
    query: dict[str, str | float] = {}
    for name in fields:
        if name in form:
            text = form[name]
            query[name] = epoch_seconds(name, text) if name in TIME_FIELDS else text
    return query
