"""Errors of finalizers and their teardown (``ctx.on_cancel``, ADR 0027).

They live beside ``errors.py`` rather than in it because that module is at its size limit;
they are ``WeftError`` subclasses like every other and reach users through the package.
"""

from __future__ import annotations

from weft_serverless.errors import WeftError


class TeardownPendingError(WeftError):
    """The run's finalizers have not all run yet (its teardown is pending): it cannot be
    purged or retried until they have."""

    def __init__(self, workflow_id: str, action: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} still has finalizers to run (its teardown is pending); "
            f"wait until describe().teardown shows it completed, then {action} again"
        )
        self.workflow_id = workflow_id
