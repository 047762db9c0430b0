"""How values look on a page: times, durations and JSON, folded when long.

Installed as Jinja filters, so templates say ``{{ run.created_at | timestamp }}`` and every
page shows a time the same way.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from flask import Flask

from weft_serverless import jsonable

FOLD_CHARS = 240
"""A JSON value longer than this is shown folded: its first line, and the rest on demand."""


def timestamp(epoch: float | None) -> str:
    """``2026-12-02 05:40:09`` (UTC), or a dash."""
    if epoch is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """``850 ms``, ``12.5 s``, ``4 m 10 s``, ``3 h 2 m``, ``2 d 4 h``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} m"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def relative(epoch: float | None, now: float | None = None) -> str:
    """``in 5 m 0 s`` or ``12.5 s ago``, against the wall clock."""
    if epoch is None:
        return "-"
    delta = epoch - (time.time() if now is None else now)
    return f"in {duration(delta)}" if delta >= 0 else f"{duration(-delta)} ago"


def pretty(value: Any) -> str:
    """Indented JSON of any stored value."""
    return json.dumps(jsonable(value), indent=2, ensure_ascii=False, sort_keys=True)


def compact(value: Any) -> str:
    """One-line JSON of any stored value."""
    return json.dumps(jsonable(value), separators=(",", ":"), ensure_ascii=False)


def is_long(value: Any) -> bool:
    """Whether ``value`` is shown folded."""
    return len(compact(value)) > FOLD_CHARS


def relative_to_engine(epoch: float | None, now: float | None = None) -> str:
    """``relative`` against the console's engine clock: the time its runs are stamped with
    (the wall clock, unless the engine was given another, as tests give a virtual one)."""
    from weft_serverless.console.state import current_console

    return relative(epoch, current_console().engine.runtime.now() if now is None else now)


def install(app: Flask) -> None:
    """Register the filters on ``app``'s Jinja environment."""
    for name, function in (
        ("timestamp", timestamp),
        ("duration", duration),
        ("relative", relative_to_engine),
        ("pretty", pretty),
        ("compact", compact),
        ("is_long", is_long),
    ):
        app.add_template_filter(function, name)
