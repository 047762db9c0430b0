"""Answers to activities that finish outside the engine (``complete_async`` tokens).

``Engine`` hands ``complete_activity`` and ``fail_activity`` to its ``AsyncActivities`` part:
each records the answer through ``drive.from_outside`` and wakes the run through the engine's
``Session``.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.engine.drive import from_outside
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.session import Session


class AsyncActivities:
    """Completing or failing an async activity attempt by its token."""

    def __init__(self, rt: Runtime, session: Session) -> None:
        self._rt = rt
        self._session = session

    def complete(self, token: str, result: Any) -> None:
        self._session.opened()
        workflow_id = from_outside.complete_async(self._rt, token, result=result)
        self._session.wake(workflow_id, "async-activity")

    def fail(self, token: str, error: BaseException | str) -> None:
        self._session.opened()
        workflow_id = from_outside.complete_async(self._rt, token, error=error, failed=True)
        self._session.wake(workflow_id, "async-activity")
