"""The operator's moves on one run (cancel, suspend, resume, retry, purge) and recovery.

``Engine`` hands each to its ``RunControl`` part: a hand-off to ``control`` or ``retention``,
then whatever the move made drivable is driven through the engine's ``Session``.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.engine import handle
from weft_serverless.engine.config import check_id
from weft_serverless.engine.runs import control, finalizers, outbox
from weft_serverless.engine.runs.retention import purge_now
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.session import Session


class RunControl:
    """What an operator (the CLI, the API, a runbook) does to a run from outside."""

    def __init__(self, rt: Runtime, session: Session) -> None:
        self._rt = rt
        self._session = session

    def cancel(self, workflow_id: str) -> None:
        state, cancelled = control.cancel(self._rt, self._session.opened(workflow_id))
        if cancelled and state.parent and state.parent.get("await", True):
            self._session.wake(state.parent["id"], "child-completion")
        self._session.settle()

    def suspend(self, workflow_id: str) -> None:
        control.suspend(self._rt, self._session.opened(workflow_id))

    def purge(self, workflow_id: str) -> None:
        purge_now(self._rt, self._session.opened(workflow_id))

    def dead_letters(self, workflow_id: str | None) -> list[dict[str, Any]]:
        return finalizers.dead_letters(self._rt, workflow_id)

    def event_dead_letters(self, workflow_id: str | None) -> list[dict[str, Any]]:
        return outbox.dead_letters(self._rt, workflow_id)

    def retry(self, workflow_id: str) -> None:
        if control.retry_failed(self._rt, self._session.opened(workflow_id)):
            self._session.wake(workflow_id, "resume")

    def recover_all(self) -> int:
        return self._session.recover_all()

    def resume(self, workflow_id: str) -> str:
        self._session.opened()
        status = self._status(workflow_id)
        return self._session.resume(workflow_id, status) or self._status(workflow_id)

    def _status(self, workflow_id: str) -> str:
        return handle.describe(self._rt, check_id(workflow_id), False).status
