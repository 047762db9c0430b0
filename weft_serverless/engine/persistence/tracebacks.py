"""A failed attempt's traceback, bounded, as its retry record and its step's error keep it.

An operator reading a failure wants the step and the line that raised: the innermost frames
and the exception's own lines. Those are kept, from the end, within ``MAX_TRACEBACK_BYTES``;
the outer frames are cut first (a note says how many lines), and the frames that
called the activity (the engine's, and the futures or event loop it ran on) are left out,
so the first frame shown is the activity's.
"""

from __future__ import annotations

import functools
import os
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

MAX_TRACEBACK_BYTES = 2048
"""UTF-8 bytes of traceback kept per failed attempt: about ten frames with their source
lines. A step keeps up to ``ATTEMPT_HISTORY`` retry records and every drive of the run reads
them all, so ten tracebacks add at most 20 KB (5 read units) to a resume."""


@functools.cache
def _callers() -> tuple[str, ...]:
    """Where the frames that call an activity live: this package, and the standard library's
    futures and event loop (a result read from a future re-raises through them)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    here = Path(__file__).resolve()
    package = str(
        next(p for p in here.parents if p.name == "weft_serverless")
    )  # wherever this sits
    return tuple(
        os.path.join(place, "") for place in (package, f"{stdlib}/concurrent", f"{stdlib}/asyncio")
    )


def of(exc: BaseException) -> str | None:
    """The traceback of ``exc`` as text, bounded; None when it cannot be formatted."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, _outside(exc.__traceback__)))
    except Exception:  # an exception whose str() raises: its type and message say enough
        return None
    return bounded(text)


def bounded(text: str, limit: int = MAX_TRACEBACK_BYTES) -> str:
    """``text`` if it fits in ``limit`` UTF-8 bytes; else its last lines that fit, after a
    note of how many lines were cut (a last line longer than half the limit is cut too)."""
    if len(text.encode()) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    budget = limit - 64  # room for the note
    last = lines.pop()
    if len(last.encode()) > budget // 2:
        last = last.encode()[: budget // 2].decode(errors="ignore") + "…\n"
    kept = [last]
    budget -= len(last.encode())
    while lines and len(lines[-1].encode()) <= budget:
        budget -= len(lines[-1].encode())
        kept.append(lines.pop())
    cut = len(lines)
    return f"[{cut} earlier line(s) of the traceback cut]\n" + "".join(reversed(kept))


def _outside(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading frames that called the activity (``_callers``)."""
    callers = _callers()
    while tb is not None and tb.tb_next is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(callers):
            break
        tb = tb.tb_next
    return tb
