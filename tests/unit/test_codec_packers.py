"""The codec reuses its msgpack Packers (one pool per thread): reuse must never mix values.

A Packer is out of the pool while it packs, so a nested pack (a tuple's or a set's items,
packed from the extension hook) takes another; a failed pack drops its Packer.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from weft_serverless.codec import decode, encode
from weft_serverless.errors import CodecError


def _value(index: int) -> dict[str, Any]:
    return {
        "n": index,
        "nested": (index, (str(index), frozenset({index})), {index + 1}),
        "at": dt.datetime(2026, 1, 1) + dt.timedelta(seconds=index),
        "big": "x" * (index % 3) * 3000,  # some values outgrow a Packer's first buffer
    }


def test_values_round_trip_while_threads_encode_at_once() -> None:
    def round_trips(offset: int) -> bool:
        values = [_value(offset + index) for index in range(300)]
        return all(decode(encode(value)) == value for value in values)

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(round_trips, range(0, 4000, 1000)))


def test_a_failed_encode_leaves_the_next_ones_whole() -> None:
    with pytest.raises(CodecError, match=r"value\[1\]\[1\]"):
        encode((1, (2, object())))
    with pytest.raises(CodecError):
        encode({"a": [1, 2, object()]})
    assert decode(encode((1, (2, 3)))) == (1, (2, 3))
    assert encode({"k": 1}) == b"\x81\xa1k\x01"
