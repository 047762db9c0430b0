"""``weft dev --shards``: checked before anything starts, handed to the handlers as
``WEFT_SHARDS`` (the table is created with those counts, ADR 0050)."""

from __future__ import annotations

import os

import pytest

from weft_serverless import devserver
from weft_serverless.cli import main


def test_bad_counts_are_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[object] = []
    monkeypatch.setattr(devserver, "run", started.append)
    assert main(["dev", "--shards", "timers=0"]) == 2
    assert "--shards" in capsys.readouterr().err
    assert started == []


def test_counts_reach_the_handlers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    configs: list[devserver.DevConfig] = []

    def run(config: devserver.DevConfig) -> int:
        configs.append(config)
        return 0

    monkeypatch.setattr(devserver, "run", run)
    assert main(["dev", "--shards", "timers=16"]) == 0
    assert configs[0].shards == "timers=16"
    environ = {key: value for key, value in os.environ.items() if key != "WEFT_SHARDS"}
    monkeypatch.setattr(devserver.os, "environ", environ)  # the test's own copy
    server = devserver.DevServer.__new__(devserver.DevServer)
    server.config, server.endpoint = configs[0], "http://127.0.0.1:1"
    server._configure_environment()
    assert environ["WEFT_SHARDS"] == "timers=16"
