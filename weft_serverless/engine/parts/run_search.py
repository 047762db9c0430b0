"""Finding runs: the engine's ``RunSearch`` part behind ``list``, ``list_page`` and ``count``
(ADR 0030).

Each builds the filter first (a bad filter raises before anything is read), then hands off
to ``listing``. The filters arrive as the keywords of ``Engine.list_page``, whose signature
types and documents them.
"""

from __future__ import annotations

import datetime
from typing import Any

from weft_serverless.engine.handle import WorkflowSummary
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.visibility import listing
from weft_serverless.engine.visibility.filters import make_filter

Time = float | datetime.datetime


class RunSearch:
    """What an operator asks to find runs: by status, type, attributes, tags, start time."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def page(
        self, limit: int, cursor: str | None, **filters: Any
    ) -> tuple[list[WorkflowSummary], str | None]:
        found = make_filter(self._rt.definitions, **filters)
        return listing.list_page(self._rt, found, limit, cursor)

    def counted_page(
        self, limit: int, cursor: str | None, **filters: Any
    ) -> tuple[list[WorkflowSummary], str | None, dict[str, int]]:
        found = make_filter(self._rt.definitions, **filters)
        return listing.counted_page(self._rt, found, limit, cursor)

    def count(self, group_by: str, **filters: Any) -> dict[Any, int]:
        found = make_filter(self._rt.definitions, **filters)
        return listing.count(self._rt, found, group_by)
