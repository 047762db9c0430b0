"""The engine writes to storage in two places only, checked from the source with ``ast``.

``engine/runs/commit.py`` owns every write the engine makes (the fence it carries, whether it is a
conditional or a plain batch, chunks within the batch limit); ``engine/ownership/base.py``
holds ``OwnerHost.write``, through which the ownership modes write their own records (those
writes are the fence itself). Code elsewhere that called the storage's writes directly would
choose its own fence, and a mode change would have to find it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import weft_serverless

PACKAGE_DIR = Path(weft_serverless.__file__).resolve().parent
WRITES = frozenset({"batch", "conditional_batch", "put", "delete", "delete_many"})
WRITERS = frozenset({"engine/runs/commit.py", "engine/ownership/base.py"})
"""Modules of the engine allowed to call a storage write (besides the storage and the test
harness, which wrap storages)."""
OUTSIDE = ("storage/", "testing/")


def _storage_writes(tree: ast.AST) -> list[int]:
    """Lines calling a write on something named ``storage`` (``rt.storage.put(...)``)."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        named = receiver.attr if isinstance(receiver, ast.Attribute) else None
        if isinstance(receiver, ast.Name):
            named = receiver.id
        if node.func.attr in WRITES and named == "storage":
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_write_path_calls_a_storage_write() -> None:
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR).as_posix()
        if relative in WRITERS or relative.startswith(OUTSIDE):
            continue
        for line in _storage_writes(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{relative}:{line}")
    assert not found, (
        "storage writes outside the write path ("
        + ", ".join(sorted(WRITERS))
        + "):\n"
        + "\n".join(found)
    )


def test_the_check_sees_the_shapes_writes_take() -> None:
    source = "rt.storage.put(k, v)\nself.host.storage.conditional_batch(c, o)\nstorage.delete(k)\n"
    assert _storage_writes(ast.parse(source)) == [1, 2, 3]
    assert _storage_writes(ast.parse("inbox.put(job)\nhandle.delete()\nrt.storage.get(k)")) == []
