"""The package's shape, checked from its source with the standard library's ``ast``.

- No import cycle inside ``weft_serverless``, counting imports under ``TYPE_CHECKING`` and
  inside functions: a loop that only type checking or a late import holds together is still
  one concept split across modules.
- The upper layers (``aws/``, ``cli_commands/``, ``devserver.py``, ``cli.py``) use the public
  package and the operator read model; they never decode storage (``storage.keys``,
  ``codec``) or reach into engine internals.
- Only the ownership package tests which ownership mode is in force.
- The engine's parts (its subpackages and the modules flat in ``engine/``) are layers: no
  import loop runs between them either, so each part reads from those below it only
  (ADR 0049; ``docs/architecture.md`` draws the layers).

Every failure names the cycle path or the offending file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import weft_serverless

PACKAGE_DIR = Path(weft_serverless.__file__).resolve().parent
PACKAGE = "weft_serverless"

UPPER_LAYERS = ("aws/", "cli_commands/", "devserver.py", "cli.py")
"""Paths under the package (a trailing ``/`` means a whole directory) that sit above the engine."""

FORBIDDEN_IN_UPPER_LAYERS = (
    "weft_serverless.storage.keys",
    "weft_serverless.codec",
    "weft_serverless.engine",
)
"""Modules (and everything under them) the upper layers must not import..."""

ALLOWED_IN_UPPER_LAYERS = frozenset({"weft_serverless.engine.inspection"})
"""...except these: the operator read model. Everything else comes through the public facade,
``weft_serverless`` itself (its ``__init__``), which is not under any forbidden prefix."""

OWNERSHIP_PACKAGE = "engine/ownership/"
"""The only place that may compare an ownership ``mode``."""

ENGINE = f"{PACKAGE}.engine"


@dataclass(frozen=True, slots=True)
class ImportSite:
    """One module an import statement brings in, and where the statement is."""

    target: str
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(PACKAGE_DIR.parent)}:{self.line}"


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root`` by dotted name (``pkg/__init__.py`` is
    ``pkg``)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join([package, *parts])] = path
    return modules


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> Iterator[ImportSite]:
    """The package modules ``name`` imports, anywhere in the file (module level, under
    ``TYPE_CHECKING``, inside functions).

    ``from pkg import mod`` imports ``pkg.mod`` when that is a module, else (a name defined
    by ``pkg``) it imports ``pkg``. Importing ``a.b.c`` is counted as importing ``a.b.c``
    only, not its parent packages: Python initialises those first, before the import that
    could close a loop, and counting them would make every module import the top package.
    """
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield ImportSite(alias.name, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.module, node.level)
            if base is None:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    yield ImportSite(submodule, path, node.lineno)
                elif base in modules:
                    yield ImportSite(base, path, node.lineno)


def _resolve(name: str, is_package: bool, module: str | None, level: int) -> str | None:
    """The absolute module a ``from ... import`` statement names (relative ones resolved)."""
    if level == 0:
        return module
    parts = name.split(".")
    if not is_package:
        parts = parts[:-1]  # a module's relative imports start from its package
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if not parts:
        return None
    return ".".join([*parts, module]) if module else ".".join(parts)


def import_graph(root: Path, package: str) -> dict[str, list[ImportSite]]:
    modules = module_files(root, package)
    return {name: list(imports_of(name, path, modules)) for name, path in modules.items()}


def cycles(graph: Mapping[str, list[ImportSite]]) -> list[set[str]]:
    """The strongly connected groups of modules (Tarjan): each is one import loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for site in graph.get(node, []):
            if site.target not in index:
                visit(site.target)
                low[node] = min(low[node], low[site.target])
            elif site.target in on_stack:
                low[node] = min(low[node], index[site.target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            self_loop = any(site.target == node for site in graph.get(node, []))
            if len(group) > 1 or self_loop:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups, key=min)


def cycle_paths(graph: Mapping[str, list[ImportSite]], group: set[str]) -> list[list[ImportSite]]:
    """Cycle paths that together pass through every module of one loop: a shortest cycle
    through its first module, then through each module no earlier path passed."""
    paths: list[list[ImportSite]] = []
    covered: set[str] = set()
    for start in sorted(group):
        if start in covered:
            continue
        path = _shortest_cycle(graph, group, start)
        covered.update(site.target for site in path)
        paths.append(path)
    return paths


def _shortest_cycle(
    graph: Mapping[str, list[ImportSite]], group: set[str], start: str
) -> list[ImportSite]:
    """A shortest cycle from ``start`` back to itself, inside ``group``, as import sites."""
    previous: dict[str, tuple[str, ImportSite]] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for site in graph.get(node, []):
                if site.target not in group:
                    continue
                if site.target == start:
                    path = [site]
                    while node != start:
                        node, step = previous[node]
                        path.insert(0, step)
                    return path
                if site.target not in previous:
                    previous[site.target] = (node, site)
                    following.append(site.target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def describe_loop(graph: Mapping[str, list[ImportSite]], group: set[str]) -> str:
    source = _sources(graph)
    short = sorted(name.removeprefix(PACKAGE + ".") for name in group)
    lines = [f"a loop of {len(group)} modules: {', '.join(short)}"]
    for path in cycle_paths(graph, group):
        lines.append("  " + " -> ".join([source[site] for site in path] + [path[-1].target]))
        lines += [f"      {source[site]} imports {site.target} at {site.where()}" for site in path]
    return "\n".join(lines)


def _sources(graph: Mapping[str, list[ImportSite]]) -> dict[ImportSite, str]:
    return {site: name for name, sites in graph.items() for site in sites}


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE_DIR).as_posix()


def _in(path: Path, places: tuple[str, ...]) -> bool:
    relative = _relative(path)
    return any(
        relative.startswith(place) if place.endswith("/") else relative == place for place in places
    )


# -- the rules ------------------------------------------------------------------------------


def test_no_import_cycles_inside_the_package() -> None:
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    loops = cycles(graph)
    assert not loops, f"{len(loops)} import loop(s):\n" + "\n".join(
        describe_loop(graph, group) for group in loops
    )


def test_no_import_cycles_outside_the_engine_package() -> None:
    """The part of the rule above that holds whatever the engine's inside looks like (the
    workflow-facing modules once had one: ``context`` <-> ``saga``)."""
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    loops = [
        group
        for group in cycles(graph)
        if not all(name.startswith(f"{PACKAGE}.engine.") for name in group)
    ]
    assert not loops, f"{len(loops)} import loop(s):\n" + "\n".join(
        describe_loop(graph, group) for group in loops
    )


def test_upper_layers_use_the_public_api_and_the_read_model_only() -> None:
    graph = import_graph(PACKAGE_DIR, PACKAGE)
    modules = module_files(PACKAGE_DIR, PACKAGE)
    offending = [
        f"{site.where()}: imports {site.target}"
        for name, sites in graph.items()
        if _in(modules[name], UPPER_LAYERS)
        for site in sites
        if site.target not in ALLOWED_IN_UPPER_LAYERS
        and any(
            site.target == forbidden or site.target.startswith(forbidden + ".")
            for forbidden in FORBIDDEN_IN_UPPER_LAYERS
        )
    ]
    assert not offending, "upper layers reach below the public API:\n" + "\n".join(offending)


def test_only_the_ownership_package_tests_the_ownership_mode() -> None:
    offending = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if _relative(path).startswith(OWNERSHIP_PACKAGE):
            continue
        for line in mode_comparisons(path):
            offending.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{line}")
    assert not offending, "the ownership mode is tested outside ownership/:\n" + "\n".join(
        offending
    )


def mode_comparisons(path: Path) -> list[int]:
    """Lines comparing an attribute named ``mode`` (``rt.fence.mode == "lease"``, ``x.mode in
    (...)``): choosing behaviour by mode belongs to the ownership strategy itself."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(
            isinstance(operand, ast.Attribute) and operand.attr == "mode"
            for operand in [node.left, *node.comparators]
        )
    )


def test_partition_reads_name_key_families_by_the_keys_constants() -> None:
    """``load_history`` sorts a partition's records by family; spelling a family as a
    literal (``family == "op"``) drifts from ``storage/keys.py`` unseen."""
    path = PACKAGE_DIR / "engine" / "persistence" / "records.py"
    tree = ast.parse(path.read_text(), str(path))
    lines = sorted({node.lineno for node in ast.walk(tree) if _spells_a_family(node)})
    where = path.relative_to(PACKAGE_DIR.parent)
    assert not lines, "key families spelled as literals:\n" + "\n".join(
        f"{where}:{line}" for line in lines
    )


def _spells_a_family(node: ast.AST) -> bool:
    """``family == "op"``, or a set of string literals (``{"op", "pend", ...}``)."""
    if isinstance(node, ast.Set):
        return any(_is_text(element) for element in node.elts)
    if not isinstance(node, ast.Compare):
        return False
    if not (isinstance(node.left, ast.Name) and node.left.id == "family"):
        return False
    return any(_is_text(side) for side in node.comparators)


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def engine_part(module: str) -> str | None:
    """The engine part a module belongs to: its subpackage (``engine.runs``), or itself when it
    sits flat in ``engine/``; ``None`` outside the engine or for the engine package itself."""
    if not module.startswith(ENGINE + "."):
        return None
    return ".".join(module.split(".")[:3])


def part_graph(graph: Mapping[str, list[ImportSite]]) -> dict[str, list[ImportSite]]:
    """The import graph between engine parts: an arrow for each import that crosses parts."""
    parts: dict[str, list[ImportSite]] = {}
    for name, sites in graph.items():
        source = engine_part(name)
        if source is None:
            continue
        arrows = parts.setdefault(source, [])
        for site in sites:
            target = engine_part(site.target)
            if target is not None and target != source:
                arrows.append(ImportSite(target, site.path, site.line))
    return parts


def test_the_engine_parts_are_layers_without_a_loop() -> None:
    """A loop between two parts (``runs`` importing ``steps`` and ``steps`` importing
    ``runs``) means a concept sits in the wrong part, even when no module loop exists."""
    graph = part_graph(import_graph(PACKAGE_DIR, PACKAGE))
    loops = cycles(graph)
    assert not loops, f"{len(loops)} loop(s) between engine parts:\n" + "\n".join(
        describe_loop(graph, group) for group in loops
    )
    assert len(graph) > 10  # the grouping is seen: subpackages and flat modules alike


# -- the checker itself, on small packages whose answers are known ---------------------------


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def _cycle_names(root: Path) -> list[list[str]]:
    graph = import_graph(root, "pkg")
    source = _sources(graph)
    return [
        [source[site] for site in path]
        for group in cycles(graph)
        for path in cycle_paths(graph, group)
    ]


def test_part_graph_finds_a_loop_between_parts_that_no_module_loop_shows() -> None:
    a = ImportSite(f"{ENGINE}.runs.start", PACKAGE_DIR / "x.py", 1)
    b = ImportSite(f"{ENGINE}.steps.attempt", PACKAGE_DIR / "y.py", 2)
    graph = {
        f"{ENGINE}.steps.children": [a],  # steps -> runs
        f"{ENGINE}.runs.teardown": [b],  # runs -> steps: no module loop
        f"{ENGINE}.runs.start": [],
        f"{ENGINE}.steps.attempt": [],
    }
    assert not cycles(graph)
    assert cycles(part_graph(graph)) == [{f"{ENGINE}.runs", f"{ENGINE}.steps"}]


def test_checker_counts_type_checking_and_function_local_imports(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n",
            "b.py": "def f():\n    from .c import g\n",
            "c.py": "import pkg.a\ndef g(): ...\n",
        },
    )
    assert _cycle_names(root) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_checker_reads_from_package_import_module_as_that_module(tmp_path: Path) -> None:
    # ``from pkg.sub import mod`` imports pkg.sub.mod (not pkg.sub); ``from pkg.sub import
    # name`` imports pkg.sub, whose __init__ importing its submodules counts.
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "from .mod import thing\n",
            "sub/mod.py": "thing = 1\n",
            "sub/other.py": "from pkg.sub import mod\n",
            "user.py": "from pkg.sub import thing\n",
        },
    )
    assert _cycle_names(root) == []
    (root / "sub" / "mod.py").write_text("from pkg.sub import other\nthing = 1\n")
    assert _cycle_names(root) == [["pkg.sub.mod", "pkg.sub.other"]]
    (root / "sub" / "mod.py").write_text("from pkg.sub import helper\nthing = 1\n")
    assert _cycle_names(root) == [["pkg.sub", "pkg.sub.mod"]]


def test_checker_does_not_count_parent_packages_of_an_import(tmp_path: Path) -> None:
    # pkg/__init__ imports pkg.a, and pkg.a imports pkg.b.c: Python initialises pkg first,
    # so that is no loop, and neither is a relative import of a sibling.
    root = _package(
        tmp_path,
        {
            "__init__.py": "from pkg.a import A\n",
            "a.py": "import pkg.b.c\nfrom . import d\nA = 1\n",
            "b/__init__.py": "",
            "b/c.py": "from ..d import D\n",
            "d.py": "D = 1\n",
        },
    )
    assert _cycle_names(root) == []


def test_checker_finds_mode_comparisons(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('if rt.fence.mode == "lease":\n    pass\nx = "lease" in {a.mode}\ny = z.mode\n')
    assert mode_comparisons(path) == [1]


@pytest.mark.parametrize(
    ("name", "is_package", "module", "level", "expected"),
    [
        ("pkg.a.b", False, "c", 1, "pkg.a.c"),
        ("pkg.a.b", False, None, 2, "pkg"),
        ("pkg.a", True, "c", 1, "pkg.a.c"),
        ("pkg.a", True, "c", 2, "pkg.c"),
        ("pkg.a", False, "x.y", 0, "x.y"),
    ],
)
def test_relative_imports_resolve_like_python(
    name: str, is_package: bool, module: str | None, level: int, expected: str
) -> None:
    assert _resolve(name, is_package, module, level) == expected
