"""``Engine.events``: a run's event log (``event_log``) read through the engine.

Mixed into ``Engine`` so the facade stays under its size limit; reading costs one range read
of the run's partition, whatever the page.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.errors import InvalidArgumentError, WorkflowNotFoundError

from . import event_log
from .config import MAX_PAGE, check_id
from .records import load_history
from .runtime import Runtime


class EventReads:
    """Reading a run's events."""

    _rt: Runtime

    def events(
        self, workflow_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The run's events in order, after the event id ``after`` (None: from its start).

        Each is ``{event_id, type, workflow_id, workflow_type, at, ...}``; ids are the same
        on every read, so the last id of a page is the ``after`` of the next.
        """
        workflow_id = check_id(workflow_id)
        if after is not None and (not isinstance(after, str) or not after):
            raise InvalidArgumentError("after must be an event id returned by events()", "after")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise InvalidArgumentError(f"limit must be an integer from 1 to {MAX_PAGE}", "limit")
        history = load_history(self._rt.storage, workflow_id)
        if history is None:
            raise WorkflowNotFoundError(workflow_id)
        return event_log.page(event_log.events_of(history), after, limit)
