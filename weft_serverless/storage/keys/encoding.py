"""Key components: percent-encoded parts, order-preserving counters, milliseconds, shards."""

from __future__ import annotations

import functools
import zlib
from urllib.parse import quote, unquote


@functools.lru_cache(maxsize=4096)
def enc(part: str) -> str:
    """Percent-encode an untrusted key component (ASCII out, no ``#``).

    Memoised: every write of a step builds its run's keys from the same workflow id.
    """
    return quote(part, safe="-_.~@:")


def dec(part: str) -> str:
    return unquote(part)


COUNTER_OVERFLOW = "~"
"""Marks a counter too large for its zero-padded width; sorts after every digit."""


def counter(value: int, width: int) -> str:
    """Text whose order is the order of non-negative integers, for a counter in a key.

    Values below ``10**width`` are the zero-padded digits, byte-identical to the keys stored
    before this encoding existed. Larger ones are ``~``, the digit count in two digits, then
    the digits: ``~`` sorts after every digit and a longer number has a larger count, so
    order holds across widths, and no encoding is a prefix of another (so a suffix such as a
    branch ``.001`` after it cannot reorder keys).
    """
    if value < 0:
        raise ValueError(f"a key counter must not be negative, got {value}")
    digits = str(value)
    if len(digits) <= width:
        return digits.zfill(width)
    if len(digits) > 99:
        raise ValueError(f"a key counter has at most 99 digits, got {len(digits)}")
    return f"{COUNTER_OVERFLOW}{len(digits):02d}{digits}"


def counter_value(text: str) -> int:
    """The integer ``counter`` encoded as ``text``."""
    if text.startswith(COUNTER_OVERFLOW):
        return int(text[3:])
    return int(text)


def shard_of(workflow_id: str, shards: int) -> int:
    return zlib.crc32(workflow_id.encode()) % shards


def ms(seconds: float) -> int:
    return round(seconds * 1000)
