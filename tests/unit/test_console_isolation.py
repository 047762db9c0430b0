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


def test_package_data_declares_the_console_templates_and_assets() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '"console/templates/*.html", "console/static/*"' in text
    static = ROOT / "weft_serverless" / "console" / "static"
    assert {"htmx.min.js", "console.css", "console.js"} <= {p.name for p in static.iterdir()}
