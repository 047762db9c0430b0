"""Talking to a run from outside: signals, updates and queries.

``Engine`` hands ``signal``, ``update`` and ``query`` to its ``Interactions`` part; each is a
hand-off to ``runs.signals`` or ``drive.from_outside``, and what it wakes is driven through the
engine's ``Session``. The contracts are on ``Engine``'s methods (and in docs/api.md).
"""

from __future__ import annotations

from typing import Any

from weft_serverless.engine.drive import from_outside
from weft_serverless.engine.runs import signals
from weft_serverless.engine.runtime import Runtime
from weft_serverless.engine.session import Session


class Interactions:
    """Signal, update and query a run by id."""

    def __init__(self, rt: Runtime, session: Session) -> None:
        self._rt = rt
        self._session = session

    def signal(self, workflow_id: str, name: str, payload: Any, signal_id: str | None) -> None:
        if signals.deliver(self._rt, self._session.opened(workflow_id), name, payload, signal_id):
            self._session.wake(workflow_id, "signal")

    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any,
        update_id: str | None,
        timeout: float | None,
    ) -> Any:
        wf, session = self._session.opened(workflow_id), self._session
        result = from_outside.send_update(
            self._rt, session.dispatcher, wf, name, payload, update_id, timeout
        )
        session.drive_woken()  # what the update's drive woke: a child it let start, a parent
        return result

    def query(self, workflow_id: str, name: str, arg: Any) -> Any:
        return from_outside.run_query(self._rt, self._session.opened(workflow_id), name, arg)
