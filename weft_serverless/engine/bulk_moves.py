"""Bulk operations on the runs a listing filter matches, mixed into ``Engine`` (ADR 0031).

``cancel_all``, ``signal_all`` and ``retry_failed_all`` take the filters of ``list`` as
keywords. ``dry_run=True`` writes nothing and returns the count and a confirmation token;
the real call must pass it as ``confirm`` and then acts on the runs that match when each
page is read. Every argument and the token are checked before anything is written.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from . import bulk, bulk_request
from .bulk import BulkOperation
from .bulk_request import BulkPreview
from .config import check_positive_int
from .runtime import Runtime
from .session import Session

DEFAULT_PAGE = 100


class BulkMoves:
    """``cancel_all``, ``signal_all``, ``retry_failed_all`` and their records."""

    _rt: Runtime
    _session: Session

    @abstractmethod
    def _open(self, workflow_id: str | None = None) -> str: ...

    def cancel_all(
        self,
        *,
        dry_run: bool = False,
        confirm: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        caller: str | None = None,
        page_size: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> BulkPreview | BulkOperation:
        """Cancel every run the filters match (dry run first; see docs/api.md)."""
        request = bulk_request.build(self._checked(), bulk_request.CANCEL, filters)
        return self._bulk(request, dry_run, confirm, reason, actor, caller, page_size)

    def signal_all(
        self,
        name: str,
        payload: Any = None,
        *,
        dry_run: bool = False,
        confirm: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        caller: str | None = None,
        page_size: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> BulkPreview | BulkOperation:
        """Signal every run the filters match, once each (``signal_id`` ``bulk-<id>``)."""
        request = bulk_request.build(self._checked(), bulk_request.SIGNAL, filters, name, payload)
        return self._bulk(request, dry_run, confirm, reason, actor, caller, page_size)

    def retry_failed_all(
        self,
        *,
        dry_run: bool = False,
        confirm: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        caller: str | None = None,
        page_size: int = DEFAULT_PAGE,
        **filters: Any,
    ) -> BulkPreview | BulkOperation:
        """Retry every failed run the filters match (``status`` is ``failed``)."""
        request = bulk_request.build(self._checked(), bulk_request.RETRY, filters)
        return self._bulk(request, dry_run, confirm, reason, actor, caller, page_size)

    def resume_bulk(self, operation_id: str) -> BulkOperation:
        """Carry a stored operation on from its cursor (a no-op once completed)."""
        checked = bulk.check_operation_id(operation_id)
        bulk.describe(self._checked(), checked)  # BulkOperationNotFoundError
        return self._advance(checked)

    def describe_bulk(self, operation_id: str) -> BulkOperation:
        """A bulk operation's record: its audit fields, counts and progress."""
        return bulk.describe(self._checked(), bulk.check_operation_id(operation_id))

    def list_bulk_operations(self) -> list[BulkOperation]:
        """Every bulk operation, oldest first; they outlive the runs they acted on."""
        return bulk.list_all(self._checked())

    def _bulk(
        self,
        request: bulk_request.BulkRequest,
        dry_run: bool,
        confirm: str | None,
        reason: str | None,
        actor: str | None,
        caller: str | None,
        page_size: int,
    ) -> BulkPreview | BulkOperation:
        size = check_positive_int(page_size, "page_size")
        for value, field in ((reason, "reason"), (actor, "actor"), (caller, "caller")):
            bulk_request.check_text(value, field)
        if dry_run:
            return bulk_request.preview(self._rt, request, size)
        bulk_request.check_token(self._rt, request, confirm)
        operation_id = bulk.create(
            self._rt,
            request,
            actor=actor or self._rt.engine_id,
            caller=caller,
            reason=reason,
            page_size=size,
        )
        return self._advance(operation_id)

    def _advance(self, operation_id: str) -> BulkOperation:
        session = self._session

        def woken(workflow_id: str) -> None:
            session.dispatcher.enqueue(workflow_id, "bulk")

        def stop() -> bool:
            return self._rt.low_on_time(None)

        done = bulk.advance(self._rt, operation_id, stop, woken, session.drive_woken)
        return done if done is not None else bulk.describe(self._rt, operation_id)

    def _checked(self) -> Runtime:
        self._open()
        return self._rt
