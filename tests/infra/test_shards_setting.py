"""The construct's ``shards`` option: checked at synth as the engine checks it, and written
as the ``WEFT_SHARDS`` text the engine reads back to the same counts (ADR 0050)."""

from __future__ import annotations

from typing import Any

import pytest
from weft_serverless_infra import construct

from weft_serverless import ConfigurationError
from weft_serverless.storage.shard_layout import parse_shards


def test_the_setting_reads_back_as_the_counts_given() -> None:
    text = construct._shards_setting({"outbox": 2, "timers": 32})
    assert text == "timers=32,outbox=2"
    assert parse_shards(text) == {"timers": 32, "outbox": 2}
    assert parse_shards("8") == dict.fromkeys(
        ("timers", "status", "claims", "visibility", "outbox"), 8
    )


@pytest.mark.parametrize(
    ("shards", "said"),
    [({"timer": 8}, "unknown index"), ({"timers": 0}, "from 1 to 256"), ({"timers": 2.5}, "whole")],
)
def test_a_bad_setting_fails_at_synth(shards: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        construct._shards_setting(shards)


@pytest.mark.parametrize("text", ["timers=", "timers=8,claims", "eight", "timers=0"])
def test_bad_text_is_refused_with_how_to_write_it(text: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_shards(text)
