"""What an operator may do to a run now, and what it waits for: the run page's actions panel.

A finished run offered all nine actions, each answered 409 or 400; a parked run did not say
which signals it waited for, so a typo in a signal's name was accepted and waited for
ever. The panel now offers what the API accepts at the run's status (``OFFERED``, checked
against the API by the tests), fills its forms with what the run waits for (``waiting_for``,
a read-only replay) and warns on a signal name it does not wait for.

The panel sits outside the refreshed section, so a payload being typed survives a refresh.
It is drawn again (out of band) only when what it shows changes: the section's refresh and
every action say which panel the page shows (its ``key``), and the answer carries a new
panel when the key differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from weft_serverless import Waiting

OFFERED: Mapping[str, tuple[str, ...]] = {
    "pending": ("signal", "query", "suspend", "cancel"),
    "running": ("signal", "update", "query", "suspend", "cancel"),
    "suspended": ("signal", "query", "resume", "cancel"),
    "completed": ("query", "purge"),
    "failed": ("query", "retry", "purge"),
    "cancelled": ("query", "purge"),
    "timed-out": ("query", "purge"),
}
"""The actions the API carries out at each status. Left out on purpose, though the API
answers 200 doing nothing: suspending a suspended run, cancelling a cancelled one and
resuming one that is not suspended."""
BUTTONS = (
    ("suspend", "Suspend"),
    ("resume", "Resume"),
    ("retry", "Retry"),
    ("cancel", "Cancel"),
    ("purge", "Purge"),
)
"""The actions with no fields, as buttons, in the panel's order."""


@dataclass(frozen=True, slots=True)
class Panel:
    """The actions panel of one run at one moment."""

    status: str
    offered: tuple[str, ...]
    waiting: Waiting | None  # None: finished, or the console does not have the code
    queries: tuple[str, ...] = ()  # the query handlers the run's code answers

    @property
    def key(self) -> str:
        """Short text that changes whenever the panel would look different."""
        waits = self.waiting.as_json() if self.waiting is not None else None
        text = repr((self.status, self.offered, waits, self.queries))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    @property
    def buttons(self) -> list[tuple[str, str]]:
        return [(action, label) for action, label in BUTTONS if action in self.offered]

    def first(self, kind: str) -> str:
        """The name a form is filled with: the first signal, update or query it waits for."""
        names = self.names(kind)
        return names[0] if names else ""

    def names(self, kind: str) -> tuple[str, ...]:
        """What the run answers of ``kind`` (``signals``, ``updates``, ``queries``)."""
        if kind == "queries":
            return self.queries
        if self.waiting is None:
            return ()
        found: tuple[str, ...] = getattr(self.waiting, kind)
        return found


def panel_of(
    status: str, waiting: Waiting | None, queries: tuple[str, ...], *, drives: bool
) -> Panel:
    """The panel for a run at ``status``; a query only where the console has the code and
    the run's code answers one."""
    offered = tuple(
        action for action in OFFERED.get(status, ()) if action != "query" or (drives and queries)
    )
    return Panel(status, offered, waiting, queries)


def signal_warning(name: str, waiting: Waiting | None) -> str | None:
    """What to tell an operator sending signal ``name`` to a run waiting for other ones."""
    if waiting is None or not name or name in waiting.signals:
        return None
    waited = ", ".join(waiting.signals) or "no signal"
    return (
        f"the run does not wait for signal {name!r} now (it waits for {waited}); "
        "the signal is kept until the run waits for it, which may be never"
    )
