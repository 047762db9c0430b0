"""The console is an optional extra: the library, the Lambda path and the CLI's other
commands never load Flask, so a Lambda package without it works and pays nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_lambda_path_and_the_cli_do_not_import_the_console() -> None:
    probe = (
        "import sys\n"
        "import weft_serverless, weft_serverless.aws, weft_serverless.cli\n"
        "from weft_serverless.aws.calls import call\n"
        "from weft_serverless.cli import _parser\n"
        "_parser()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('flask', 'jinja2') "
        "or m.startswith('weft_serverless.console'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_package_data_ships_every_console_template_and_asset() -> None:
    """Every file the console serves matches a package-data pattern, so the wheel carries it
    (a template or asset in a new subfolder would not, and fails here)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["weft_serverless"]
    package = ROOT / "weft_serverless"
    served = [
        path.relative_to(package).as_posix()
        for folder in ("console/templates", "console/static")
        for path in (package / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    assert {"console/static/htmx.min.js", "console/templates/base.html"} <= set(served)
    shipped = {path.relative_to(package).as_posix() for p in patterns for path in package.glob(p)}
    assert sorted(set(served) - shipped) == []
