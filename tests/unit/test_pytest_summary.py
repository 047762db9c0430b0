"""The project's pytest configuration keeps the closing summary line that CI reads.

``addopts`` once carried ``-q``, so ``pytest -q`` became ``-qq`` and printed no "N passed"
line at all. Both invocations a reader or CI uses must end with one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags", [["-q"], []], ids=["pytest -q", "scripts/test"])
def test_the_run_ends_with_a_passed_count(tmp_path: Path, flags: list[str]) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    config = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *flags, *config, str(tmp_path / "test_one.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\b1 passed\b", last), run.stdout
