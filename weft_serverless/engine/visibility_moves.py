"""Finding runs: ``list``, ``list_page`` and ``count`` with their filters (ADR 0030).

Mixed into ``Engine`` so the facade stays small; each is a hand-off to ``listing`` once the
filter is checked (a bad filter raises before anything is read).
"""

from __future__ import annotations

import builtins
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from . import listing
from .filters import make_filter
from .handle import WorkflowSummary
from .runtime import Runtime

Time = float | datetime.datetime


class VisibilityMoves:
    """What an operator asks to find runs: by status, type, attributes, tags, start time."""

    _rt: Runtime

    def list(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        *,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        order: str = "oldest",
        type_prefix: str | None = None,
    ) -> builtins.list[WorkflowSummary]:
        """Runs passing every filter, oldest (or ``order="newest"``) first; ``where`` maps a
        search attribute to a value or ``(operator, value)`` (see ``list_page`` for paging)."""
        return self.list_page(
            status,
            workflow_type,
            limit,
            where=where,
            tags=tags,
            started_after=started_after,
            started_before=started_before,
            id_prefix=id_prefix,
            order=order,
            type_prefix=type_prefix,
        )[0]

    def list_page(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        order: str = "oldest",
        type_prefix: str | None = None,
    ) -> tuple[builtins.list[WorkflowSummary], str | None]:
        """One page of ``list`` and the cursor of the next page (None when done); pass the
        same filters with the cursor."""
        found = make_filter(
            self._rt.definitions,
            status,
            workflow_type,
            where,
            tags,
            started_after,
            started_before,
            id_prefix,
            order,
            type_prefix,
        )
        return listing.list_page(self._rt, found, limit, cursor)

    def list_page_with_counts(
        self,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        *,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        order: str = "oldest",
        type_prefix: str | None = None,
    ) -> tuple[builtins.list[WorkflowSummary], str | None, dict[str, int]]:
        """``list_page`` and ``count("status")`` of the same filters but the status, from
        one read of the index: a page of runs beside the count of each status."""
        found = make_filter(
            self._rt.definitions,
            status,
            workflow_type,
            where,
            tags,
            started_after,
            started_before,
            id_prefix,
            order,
            type_prefix,
        )
        return listing.counted_page(self._rt, found, limit, cursor)

    def count(
        self,
        group_by: str = "status",
        *,
        status: str | None = None,
        workflow_type: str | None = None,
        where: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        started_after: Time | None = None,
        started_before: Time | None = None,
        id_prefix: str | None = None,
        type_prefix: str | None = None,
    ) -> dict[Any, int]:
        """How many runs pass the filters, per ``status``, ``workflow_type`` or value of a
        search attribute (runs without it count under ``None``)."""
        found = make_filter(
            self._rt.definitions,
            status,
            workflow_type,
            where,
            tags,
            started_after,
            started_before,
            id_prefix,
            type_prefix=type_prefix,
        )
        return listing.count(self._rt, found, group_by)
