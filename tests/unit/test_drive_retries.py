"""The one policy for a commit another writer won: re-read and replay, a bounded number of times."""

from __future__ import annotations

import pytest

from weft_serverless.engine.drive.guarded import LOST_COMMIT_RETRIES, KeptLosing, retry_lost_commits
from weft_serverless.engine.runs.commit import LostCommit


def test_a_lost_commit_is_retried_as_a_retry_until_it_lands() -> None:
    kinds: list[str] = []

    def attempt(kind: str) -> str:
        kinds.append(kind)
        if len(kinds) < LOST_COMMIT_RETRIES:
            raise LostCommit("wf")
        return "completed"

    assert retry_lost_commits("wf", "signal", attempt) == "completed"
    assert kinds == ["signal"] + ["retry"] * (LOST_COMMIT_RETRIES - 1)


def test_every_attempt_lost_ends_in_kept_losing_after_the_bound() -> None:
    calls: list[str] = []

    def attempt(kind: str) -> str:
        calls.append(kind)
        raise LostCommit("wf")

    with pytest.raises(KeptLosing):
        retry_lost_commits("wf", "update", attempt)
    assert len(calls) == LOST_COMMIT_RETRIES


def test_other_errors_are_not_retried() -> None:
    calls: list[str] = []

    def attempt(kind: str) -> str:
        calls.append(kind)
        raise ValueError("boom")

    with pytest.raises(ValueError):
        retry_lost_commits("wf", "wake", attempt)
    assert calls == ["wake"]
