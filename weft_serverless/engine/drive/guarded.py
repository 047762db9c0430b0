"""The one ownership-guarded drive, and the one policy for a commit another writer won.

Every drive (a wake from the queue, an explicit resume, an update) asks the ownership mode
first, tells it afterwards what the run did, and wakes ``result()`` waiters; a drive whose
commit was refused because another writer committed first re-reads and replays, a few
times, through ``retry_lost_commits``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from weft_serverless.engine.drive.run_loop import DriveRequest, drive
from weft_serverless.engine.runs.commit import LostCommit
from weft_serverless.engine.runtime import Runtime, logger

LOST_COMMIT_RETRIES = 3

T = TypeVar("T")


class KeptLosing(Exception):
    """Internal: every attempt lost its commit to another writer; the caller says what now."""


def guarded_drive(
    rt: Runtime,
    workflow_id: str,
    kind: str,
    request: DriveRequest,
    enqueue: Callable[[str], None],
    *,
    explicit: bool,
) -> str:
    """Drive one workflow if this engine may: the ownership verdict when it may not (retain,
    collect), else the status the drive left it in (``"gone"`` when it no longer exists).

    ``explicit``: a caller asked for this run by name (resume, update), so a claim held
    elsewhere is an error rather than a wake left to its owner.
    """
    verdict = rt.fence.prepare_wake(workflow_id, kind, explicit=explicit)
    if verdict != "drive":
        return verdict
    status: str | None = "error"
    try:
        status = drive(rt, workflow_id, enqueue, request)
    finally:
        rt.fence.after_drive(workflow_id, status, frozenset(request.awaiting))
        with rt.terminal_changed:
            rt.terminal_changed.notify_all()
    return status or "gone"


def retry_lost_commits(workflow_id: str, kind: str, attempt: Callable[[str], T]) -> T:
    """Run ``attempt(kind)``, again (as a ``"retry"``) while another writer wins its commit;
    raise ``KeptLosing`` after ``LOST_COMMIT_RETRIES`` attempts."""
    for _ in range(LOST_COMMIT_RETRIES):
        try:
            return attempt(kind)
        except LostCommit:
            logger.info(
                "workflow %s: another writer committed first; re-reading",
                workflow_id,
                extra={"workflow_id": workflow_id},
            )
            kind = "retry"
    raise KeptLosing(workflow_id)
