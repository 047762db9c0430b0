"""The operator's moves on one run (cancel, suspend, resume, retry, purge) and recovery.

Mixed into ``Engine``: the facade stays one object for callers, and each move is a one-line
hand-off to ``control`` or ``retention`` through the engine's ``Session``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from . import control, finalizers, outbox
from .handle import WorkflowDescription
from .retention import purge_now
from .runtime import Runtime
from .session import Session


class OperatorMoves:
    """What an operator (the CLI, the API, a runbook) does to a run from outside."""

    _rt: Runtime
    _session: Session

    @abstractmethod
    def _open(self, workflow_id: str | None = None) -> str: ...

    @abstractmethod
    def describe(self, workflow_id: str, *, attempts: bool = False) -> WorkflowDescription: ...

    def cancel(self, workflow_id: str) -> None:
        """Cancel a run; its ``result()`` then raises ``WorkflowCancelledError``."""
        state, cancelled = control.cancel(self._rt, self._open(workflow_id))
        if cancelled and state.parent and state.parent.get("await", True):
            self._session.wake(state.parent["id"], "child-completion")
        self._session.settle()

    def suspend(self, workflow_id: str) -> None:
        """Pause a run until ``resume``; timers that fall due meanwhile are re-armed then."""
        control.suspend(self._rt, self._open(workflow_id))

    def purge(self, workflow_id: str) -> None:
        """Delete a finished run now (its idempotency key stays taken); see ``retention``."""
        purge_now(self._rt, self._open(workflow_id))

    def list_dead_letters(self, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """Finalizers that exhausted their retries (of one workflow id, or every one); they
        outlive purges of their runs, so an operator can act on them."""
        return finalizers.dead_letters(self._rt, workflow_id)

    def list_event_dead_letters(self, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """Events the event sink kept refusing, moved out of the outbox (of one workflow id,
        or every one): ``{event, tries, error, first_refused_at, at}`` each. Like finalizer
        dead letters they outlive purges of their runs."""
        return outbox.dead_letters(self._rt, workflow_id)

    def retry(self, workflow_id: str) -> None:
        """Re-run a failed workflow from its last good step (the failed step runs again)."""
        if control.retry_failed(self._rt, self._open(workflow_id)):
            self._session.wake(workflow_id, "resume")

    def recover_all(self) -> int:
        """Drive every running workflow from its stored history; returns how many."""
        return self._session.recover_all()

    def resume(self, workflow_id: str) -> str:
        """Resume a suspended run, or drive a running one now; returns its status after."""
        self._open()
        status = self.describe(workflow_id).status
        return self._session.resume(workflow_id, status) or self.describe(workflow_id).status
