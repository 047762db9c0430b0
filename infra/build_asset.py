"""Build the plain folder both Lambda functions are deployed from, without Docker.

Usage (from the project root)::

    python infra/build_asset.py --workflows-module examples.order --out build/lambda

It copies ``weft_serverless/``, ``handlers/`` and the workflows' top-level package, then
installs the runtime dependencies from ``pyproject.toml`` (minus boto3, which the Lambda
runtime provides) as manylinux aarch64 wheels for the Lambda Python version. Cross-installing
binary wheels is what lets an x86 laptop build an arm64 package with no container.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from weft_serverless_infra.names import PYTHON_VERSION, RUNTIME_PACKAGES

MARKER = ".weft-asset"
"""Written into every built folder; only a folder holding it is ever emptied."""

PROVIDED_BY_RUNTIME = frozenset({"boto3", "botocore"})
PLATFORM = "manylinux2014_aarch64"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


def runtime_requirements(pyproject: Path) -> list[str]:
    """The project's dependencies, minus those the Lambda Python runtime already ships."""
    with pyproject.open("rb") as f:
        dependencies: list[str] = tomllib.load(f)["project"]["dependencies"]
    return [d for d in dependencies if _distribution(d) not in PROVIDED_BY_RUNTIME]


def pip_command(
    target: Path, requirements: Sequence[str], requirement_files: Sequence[Path] = ()
) -> list[str]:
    """The pip call that installs arm64 CPython wheels into ``target``.

    ``--no-compile`` because bytecode made by the build interpreter would not match the
    Lambda's Python version.
    """
    command = [sys.executable, "-m", "pip", "install", "--target", str(target)]
    command += ["--platform", PLATFORM, "--only-binary=:all:"]
    command += ["--python-version", PYTHON_VERSION, "--implementation", "cp", "--no-compile"]
    command += list(requirements)
    for path in requirement_files:
        command += ["--requirement", str(path)]
    return command


def build(
    out: Path,
    workflows_module: str,
    *,
    root: Path,
    requirement_files: Sequence[Path] = (),
    run: Callable[..., Any] = subprocess.run,
) -> Path:
    """Rebuild ``out`` from the sources under ``root``; return it.

    Raises:
        ValueError: if ``out`` would overwrite something that is not a previous build, or
            the workflows package is not found under ``root``.
    """
    out = out.resolve()
    root = root.resolve()
    _prepare(out, root)
    top = workflows_module.split(".")[0]
    for package in dict.fromkeys((*RUNTIME_PACKAGES, top)):
        _copy(root, out, package)
    run(
        pip_command(out, runtime_requirements(root / "pyproject.toml"), requirement_files),
        check=True,
    )
    return out


def _prepare(out: Path, root: Path) -> None:
    if out == root or out in root.parents:
        raise ValueError(f"refusing to build into {out}: it contains the project")
    if out.exists():
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise ValueError(f"refusing to empty {out}: it was not made by build_asset.py")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("built by infra/build_asset.py; safe to delete\n")


def _copy(root: Path, out: Path, name: str) -> None:
    if (root / name).is_dir():
        shutil.copytree(root / name, out / name, ignore=_IGNORE)
    elif (root / f"{name}.py").is_file():
        shutil.copy2(root / f"{name}.py", out / f"{name}.py")
    else:
        raise ValueError(f"no package or module {name!r} under {root}")


def _distribution(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    return match.group(0).lower().replace("_", "-") if match else ""


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows-module", default="examples.order")
    parser.add_argument("--out", type=Path, default=Path("build/lambda"))
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument(
        "--requirements",
        type=Path,
        action="append",
        default=[],
        help="extra requirements file for the workflows' own dependencies (repeatable)",
    )
    args = parser.parse_args(argv)
    out = build(
        args.out,
        args.workflows_module,
        root=args.root,
        requirement_files=args.requirements,
    )
    print(f"asset folder ready: {out}")


if __name__ == "__main__":
    main()
