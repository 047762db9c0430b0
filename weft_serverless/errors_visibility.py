"""Errors of search attributes, tags and list filters (ADR 0030).

They live beside ``errors.py`` rather than in it because that module is at its size limit.
Each is an ``InvalidArgumentError`` (an HTTP layer answers 400), raised before any write.
"""

from __future__ import annotations

from weft_serverless.errors import InvalidArgumentError


class SearchAttributeError(InvalidArgumentError):
    """A search attribute is not declared by the workflow type, or its value has the wrong
    type; nothing was written."""


class InvalidTagError(InvalidArgumentError):
    """A run's tags break the documented limits (count, length, characters); nothing was
    written."""


class InvalidFilterError(InvalidArgumentError):
    """A list or count filter cannot be applied: unknown operator, malformed value, bad
    ``group_by`` or ``order``."""
