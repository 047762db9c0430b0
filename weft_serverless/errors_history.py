"""Errors of bounded history (``max_history``, ``continue_as_new``).

They live beside ``errors.py`` rather than in it because that module is at its size limit;
they are ``WeftError`` subclasses like every other and reach users through the package.
"""

from __future__ import annotations

from weft_serverless.errors import WeftError


class HistoryLimitExceededError(WeftError):
    """A run would commit more step records than its workflow's ``max_history`` allows.

    The run ends ``failed`` with this error instead of growing without bound; ``count`` is
    the number of step records it had committed, ``limit`` the declared bound.
    """

    def __init__(self, workflow_id: str, count: int, limit: int) -> None:
        self.reason = (
            f"the run has committed {count} step records and its workflow allows at most "
            f"{limit} (max_history)"
        )
        super().__init__(
            f"workflow {workflow_id!r}: {self.reason}; raise max_history, or end long-lived "
            "loops with `yield ctx.continue_as_new(state)` (a fresh history, same id)"
        )
        self.workflow_id = workflow_id
        self.count = count
        self.limit = limit
