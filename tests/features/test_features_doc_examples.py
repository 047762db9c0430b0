"""Every Python example in ``docs/features.md`` runs as written (its asserts included).

Each fenced ``python`` block is self-contained and runs in a fresh namespace. The examples use
``MemoryStorage`` by design (a reader can paste them), so this module is not parametrised
over the storage backends; the behaviour they show is covered per backend by the other
modules of this directory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FEATURES_DOC = Path(__file__).resolve().parents[2] / "docs" / "features.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _examples() -> list[tuple[str, str]]:
    text = FEATURES_DOC.read_text(encoding="utf-8")
    found: list[tuple[str, str]] = []
    for match in _BLOCK.finditer(text):
        heading = re.findall(r"^## (.+)$", text[: match.start()], re.MULTILINE)
        section = heading[-1] if heading else "intro"
        found.append((f"{len(found) + 1}-{section}", match.group(1)))
    return found


EXAMPLES = _examples()


def test_the_page_has_an_example_per_feature() -> None:
    """One or more examples under each feature heading."""
    sections = {name.split("-", 1)[1] for name, _ in EXAMPLES}
    for feature in (
        "Updates",
        "Queries",
        "Conditions",
        "Async",
        "Idempotent",
        "lifecycle",
        "Child",
        "Sagas",
        "Versioning",
    ):
        assert any(feature in section for section in sections), feature


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_runs(name: str, code: str) -> None:
    """The example executes without error and its assertions hold."""
    exec(compile(code, f"{FEATURES_DOC.name}:{name}", "exec"), {"__name__": "__doc_example__"})
