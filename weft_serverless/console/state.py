"""The console an app serves: its engine, what it looks at and what it may do.

Apart from ``app`` (which imports the pages), so pages and actions can reach the console of
the current request without importing the app module back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import current_app

from weft_serverless import Engine
from weft_serverless.loopback import LOOPBACK_NAMES

CONSOLE_KEY = "weft_console"


@dataclass(frozen=True, slots=True)
class Console:
    """What the pages need: the engine, what the console looks at, and what it may do."""

    engine: Engine
    target: str  # "SQLite file weft.db", "DynamoDB table weft-dev at http://...", ...
    read_only: bool = False
    drives: bool = False  # built with the workflows: a signal drives the run here
    refresh_seconds: float = 2.0
    samples: Mapping[str, Any] = field(default_factory=dict)  # an input per type, to start
    allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES  # None: bound beyond loopback


def current_console() -> Console:
    """The console of the app serving the current request."""
    found: Console = current_app.extensions[CONSOLE_KEY]
    return found
