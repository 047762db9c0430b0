"""Talking to a run from outside: signals, updates and queries.

Mixed into ``Engine``, like ``operator_moves``: each is a hand-off to ``signals`` or
``interactions`` through the engine's ``Session``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from . import interactions, signals
from .runtime import Runtime
from .session import Session


class InteractionMoves:
    """Signal, update and query a run by id."""

    _rt: Runtime
    _session: Session

    @abstractmethod
    def _open(self, workflow_id: str | None = None) -> str: ...

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        """Deliver a signal (buffered until the workflow waits for it); a repeated id is a no-op."""
        if signals.deliver(self._rt, self._open(workflow_id), name, payload, signal_id):
            self._session.wake(workflow_id, "signal")

    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Apply an update where the workflow is parked and return its handler's result."""
        wf, session = self._open(workflow_id), self._session
        result = interactions.send_update(
            self._rt, session.dispatcher, wf, name, payload, update_id, timeout
        )
        session.drive_woken()  # what the update's drive woke: a child it let start, a parent
        return result

    def query(self, workflow_id: str, name: str, arg: Any = None) -> Any:
        """Answer a query from the workflow's current state, read-only, on any engine."""
        return interactions.run_query(self._rt, self._open(workflow_id), name, arg)
