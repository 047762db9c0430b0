"""Commands printed as hints run as printed, by a newcomer who did not activate the venv:
``weft dev``'s banner names the venv's ``weft`` by path, and installs the console's extra
from the checkout it runs from, not from the package index."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from weft_serverless import hints
from weft_serverless.devserver import DevConfig, DevServer

REPO = Path(__file__).resolve().parents[2]


def _runs_here(command: str) -> bool:
    """Whether the first word of ``command`` is an executable file, from the cwd."""
    first = Path(shlex.split(command)[0])
    return first.is_file() and os.access(first, os.X_OK)


def banner(monkeypatch: pytest.MonkeyPatch, *, console_installed: bool) -> list[str]:
    from weft_serverless import devserver

    monkeypatch.setattr(devserver, "_has_console", lambda: console_installed)
    dev = DevServer(DevConfig(workflows="examples.workflows"))
    dev.url, dev.endpoint, dev.workflow_types = "http://127.0.0.1:8080", "http://m", ["order"]
    return [line.strip() for line in dev.banner().splitlines()]


def test_from_the_checkout_the_banner_names_the_venvs_weft_and_the_checkouts_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    lines = banner(monkeypatch, console_installed=False)
    weft = hints.program("weft")
    assert not weft.startswith("weft") and _runs_here(weft), weft
    listing = lines[lines.index("operator CLI (another shell, in this directory):") + 1]
    assert listing.endswith(f" {weft} list")
    at = lines.index("web console (another shell, in this directory):")
    install, console = lines[at + 1], lines[at + 2]
    assert install.endswith(" install -e '.[console]'") and _runs_here(install), install
    assert "weft-serverless[console]" not in "\n".join(lines)
    assert console.startswith(f"{weft} console --table weft-dev --endpoint-url http://m ")
    assert console.endswith("--workflows examples.workflows")
    # with the extra installed there is nothing to install
    lines = banner(monkeypatch, console_installed=True)
    at = lines.index("web console (another shell, in this directory):")
    assert lines[at + 1].startswith(f"{weft} console ")


def test_from_another_directory_the_hints_name_absolute_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    weft, install = hints.program("weft"), hints.install_extra("console")
    assert Path(shlex.split(weft)[0]).is_absolute() and _runs_here(weft)
    assert install.endswith(f" install -e {shlex.quote(f'{REPO}[console]')}")
    assert _runs_here(install)


def test_a_missing_extra_names_the_command_that_installs_it_from_the_checkout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    assert hints.install_extra("local").endswith(" install -e '.[local]'")
