"""What the simulated world records of the workload as it runs (``sim_workload.Observer``).

Activities tell the world each time they run, what a heartbeating attempt was handed,
which finalizers ran and which async tokens they handed out; actions record what they sent
and what the engines acknowledged. The invariants read these records after the run. The
``World`` is an ``Observing``: the parts that need its engines and faults (an activity run
may crash, stall or hang the engine) are the world's own.
"""

from __future__ import annotations

from typing import Any

from weft_serverless.testing.sim_records import Beat


class Observing:
    """The records an ``Observer`` keeps; ``World`` adds what touches engines and time."""

    def __init__(self) -> None:
        self.signal_attempts = 0
        self.signals_delivered: dict[str, set[str]] = {}
        self.updates_ok: dict[str, set[str]] = {}
        self.tokens: list[tuple[str, int, str]] = []
        self.completed_tokens: set[str] = set()
        self.beats: dict[tuple[str, int], list[Beat]] = {}
        self.hung: list[tuple[str, int, int]] = []
        self.finalizer_runs: dict[tuple[str, int, int], list[int]] = {}
        self.schedules: list[str] = []
        self.listing_problems: list[str] = []
        self.bulk_problems: list[str] = []
        self.overdue: list[str] = []
        self.unbounded: list[str] = []  # maps that ran more attempts at once than their bound
        self._ledger: dict[str, Any] = {}
        # child id -> status of children not finished, filled by the liveness check
        self.live_children: dict[str, str] = {}

    def async_token(self, workflow_id: str, step: int, token: str) -> None:
        self.tokens.append((workflow_id, step, token))

    def ledger(self) -> dict[str, Any]:
        return self._ledger

    def signals_sent(self, workflow_id: str) -> int:
        return len(self.signals_delivered.get(workflow_id, ()))

    def updates_applied(self, workflow_id: str) -> int:
        return len(self.updates_ok.get(workflow_id, ()))

    def token_completed(self, workflow_id: str, step: int) -> bool:
        """Whether the latest token the step handed out (its current attempt's) was completed."""
        mine = [token for wf, n, token in self.tokens if (wf, n) == (workflow_id, step)]
        return bool(mine) and mine[-1] in self.completed_tokens

    def child_live(self, child_id: str) -> bool:
        return child_id in self.live_children

    def child_pending(self, child_id: str) -> bool:
        return self.live_children.get(child_id) == "pending"

    def finalized(self, arg: dict[str, Any], attempt: int) -> None:
        key = (str(arg["wf"]), int(arg["run"]), int(arg["pos"]))
        self.finalizer_runs.setdefault(key, []).append(attempt)

    def note_beat(self, workflow_id: str, step: int, beat: Beat) -> None:
        self.beats.setdefault((workflow_id, step), []).append(beat)

    def drive_overdue(self, why: str) -> None:
        self.overdue.append(why)
