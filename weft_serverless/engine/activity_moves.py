"""Answers to activities that finish outside the engine (``complete_async`` tokens).

Mixed into ``Engine``, like ``operator_moves``: each is a one-line hand-off to
``interactions`` through the engine's ``Session``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from . import interactions
from .runtime import Runtime
from .session import Session


class ActivityMoves:
    """Completing or failing an async activity attempt by its token."""

    _rt: Runtime
    _session: Session

    @abstractmethod
    def _open(self, workflow_id: str | None = None) -> str: ...

    def complete_activity(self, token: str, result: Any = None) -> None:
        """Complete an async activity with ``result`` (single use) and resume its workflow."""
        self._open()
        workflow_id = interactions.complete_async(self._rt, token, result=result)
        self._session.wake(workflow_id, "async-activity")

    def fail_activity(self, token: str, error: BaseException | str) -> None:
        """Fail an async activity attempt; the activity's retry policy decides what follows."""
        self._open()
        workflow_id = interactions.complete_async(self._rt, token, error=error, failed=True)
        self._session.wake(workflow_id, "async-activity")
