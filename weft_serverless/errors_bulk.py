"""Errors of bulk operations (``cancel_all``, ``signal_all``, ``retry_failed_all``, ADR 0031).

They live beside ``errors.py`` because that module is at its size limit; they are
``WeftError`` subclasses like every other and reach users through the package.
"""

from __future__ import annotations

from weft_serverless.errors import WeftError


class BulkConfirmationError(WeftError):
    """A bulk operation was called without the token of its dry run, or with a token that is
    malformed, expired, or was issued for another operation, arguments or filter. Nothing
    was done; ``reason`` says which (``missing``, ``malformed``, ``expired``, ``mismatch``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(
            f"bulk operation not confirmed ({reason}): {detail}; call it with dry_run=True "
            "first, check the count, then call it again with confirm=<the token returned>"
        )
        self.reason = reason


class BulkOperationNotFoundError(WeftError):
    """No bulk operation is stored under this id (see ``list_bulk_operations``)."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"no bulk operation {operation_id!r}; list_bulk_operations() shows the stored ones"
        )
        self.operation_id = operation_id
