"""Bulk operations on the runs a listing filter matches: the engine's ``BulkActions`` part
(ADR 0031).

``cancel_all``, ``signal_all`` and ``retry_failed_all`` take the filters of ``list`` as
keywords. ``dry_run=True`` writes nothing and returns the count and a confirmation token;
the real call must pass it as ``confirm`` and then acts on the runs that match when each
page is read. Every argument and the token are checked before anything is written.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.engine.bulk import operation as bulk
from weft_serverless.engine.bulk import request as bulk_request
from weft_serverless.engine.bulk.operation import BulkOperation
from weft_serverless.engine.bulk.request import BulkPreview
from weft_serverless.engine.config import check_positive_int
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.session import Session

DEFAULT_PAGE = 100


class BulkActions:
    """``cancel_all``, ``signal_all``, ``retry_failed_all`` and their records."""

    def __init__(self, rt: Runtime, session: Session) -> None:
        self._rt = rt
        self._session = session

    def start(
        self,
        kind: str,
        filters: dict[str, Any],
        dry_run: bool,
        confirm: str | None,
        reason: str | None,
        actor: str | None,
        caller: str | None,
        page_size: int,
        name: str | None = None,
        payload: Any = None,
    ) -> BulkPreview | BulkOperation:
        """Operation ``kind`` (``bulk_request.CANCEL``, ``SIGNAL`` or ``RETRY``) on the runs
        ``filters`` match: a preview on ``dry_run``, else the operation carried as far as the
        invocation's time allows. Everything is checked before anything is written."""
        request = bulk_request.build(self._checked(), kind, filters, name, payload)
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

    def resume(self, operation_id: str) -> BulkOperation:
        checked = bulk.check_operation_id(operation_id)
        bulk.describe(self._checked(), checked)  # BulkOperationNotFoundError
        return self._advance(checked)

    def describe(self, operation_id: str) -> BulkOperation:
        return bulk.describe(self._checked(), bulk.check_operation_id(operation_id))

    def list_all(self) -> list[BulkOperation]:
        return bulk.list_all(self._checked())

    def _advance(self, operation_id: str) -> BulkOperation:
        session = self._session

        def woken(workflow_id: str) -> None:
            session.dispatcher.enqueue(workflow_id, "bulk")

        def stop() -> bool:
            return self._rt.low_on_time(None)

        done = bulk.advance(self._rt, operation_id, stop, woken, session.drive_woken)
        return done if done is not None else bulk.describe(self._rt, operation_id)

    def _checked(self) -> Runtime:
        self._session.opened()
        return self._rt
