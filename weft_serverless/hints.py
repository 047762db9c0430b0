"""Commands printed as hints (``weft dev``'s banner, a missing extra), spelled to run as shown.

A bare ``weft`` or ``pip`` is found only once the venv is activated, and
``pip install 'weft-serverless[console]'`` asks the package index for what a checkout
installs itself. So a hint names the programs of the running environment by path
(``.venv/bin/weft`` from the checkout's root) and, when the package runs from a source
checkout, installs an extra from that checkout (``.venv/bin/pip install -e '.[console]'``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

SOURCE_TREE = Path(__file__).resolve().parents[1]
"""The folder holding the ``weft_serverless`` package: a checkout has its pyproject there."""


def program(name: str) -> str:
    """``name`` (``weft``, ``pip``) of the running environment, as a path to type from the
    current directory; for ``weft`` without its script, the interpreter running the CLI."""
    script = Path(sys.executable).parent / name
    if script.is_file() and os.access(script, os.X_OK):
        return _typed(script)
    if name == "weft":
        return f"{_typed(Path(sys.executable))} -m weft_serverless.cli"
    return f"{_typed(Path(sys.executable))} -m {name}"


def install_extra(extra: str) -> str:
    """The command that installs ``extra`` where this package runs: from the checkout (in
    editable mode) when it runs from one, else from the package index."""
    pip = program("pip")
    if (SOURCE_TREE / "pyproject.toml").is_file():
        return f"{pip} install -e {shlex.quote(f'{_typed(SOURCE_TREE)}[{extra}]')}"
    return f"{pip} install {shlex.quote(f'weft-serverless[{extra}]')}"


def _typed(path: Path) -> str:
    """``path`` relative to the current directory when under it (``.venv/bin/weft``, ``.``),
    else as given; quoted for a shell when it needs to be."""
    try:
        shown = os.path.relpath(path, Path.cwd())
    except ValueError:  # another drive
        shown = str(path)
    if shown.startswith(".."):
        shown = str(path)
    elif shown != "." and os.sep not in shown:
        shown = f".{os.sep}{shown}"
    return shlex.quote(shown)
