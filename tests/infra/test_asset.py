"""``infra/build_asset.py`` and the names ``infra`` duplicates from the runtime; no CDK needed."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from weft_serverless_infra import names

from weft_serverless.aws import maintenance, runtime
from weft_serverless.storage import dynamodb_schema, keys

ROOT = Path(__file__).resolve().parents[2]


def test_duplicated_names_agree_with_the_runtime() -> None:
    assert names.PARTITION_KEY == dynamodb_schema.PARTITION_ATTRIBUTE
    assert names.SORT_KEY == dynamodb_schema.SORT_ATTRIBUTE
    assert names.TTL_ATTRIBUTE == dynamodb_schema.TTL_ATTRIBUTE
    assert names.TABLE_NAME_ENV == dynamodb_schema.TABLE_NAME_ENV
    assert names.OFFLOAD_BUCKET_ENV == dynamodb_schema.OFFLOAD_BUCKET_ENV
    assert names.SHARDS_ENV == runtime.SHARDS_ENV
    assert names.NEW_STORE_SHARDS_ENV == runtime.NEW_STORE_SHARDS_ENV
    assert names.PARALLEL_FIRES_ENV == maintenance.PARALLEL_ENV
    assert names.MAX_SHARDS == maintenance.MAX_WORKERS  # a worker per shard at most
    assert names.SHARD_INDEXES == keys.INDEXES
    assert names.MAX_SHARDS == keys.MAX_COUNT


def test_offload_grant_covers_the_adapter_default_prefix() -> None:
    from weft_serverless.storage.dynamodb import DynamoDBStorage

    default = inspect.signature(DynamoDBStorage).parameters["offload_prefix"].default
    assert default == names.OFFLOAD_PREFIX


def test_infra_imports_nothing_of_the_runtime() -> None:
    offenders = []
    for path in sorted((ROOT / "infra").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                if module == "weft_serverless" or module.startswith("weft_serverless."):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {module}")
    assert offenders == []


def test_asset_builder_does_not_load_the_cdk() -> None:
    code = "import sys, build_asset; assert 'aws_cdk' not in sys.modules, 'aws_cdk loaded'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT / "infra", check=True)


@pytest.fixture
def build_asset(infra_module: Callable[[str], Any]) -> Any:
    return infra_module("build_asset")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A miniature project root with the layout ``build_asset.py`` copies from."""
    root = tmp_path / "project"
    files = {
        "pyproject.toml": '[project]\ndependencies = ["boto3>=1.34", "aws-lambda-powertools>=3.0",'
        ' "msgpack>=1.0.7"]\n',
        "weft_serverless/__init__.py": "",
        "weft_serverless/__pycache__/x.cpython-311.pyc": "",
        "handlers/api.py": "",
        "handlers/maintenance.py": "",
        "examples/__init__.py": "",
        "examples/order.py": "workflows = {}\n",
        "tests/test_x.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_build_copies_packages_and_installs_arm64_wheels(build_asset: Any, project: Path) -> None:
    calls: list[tuple[list[str], dict[str, Any]]] = []
    out = project / "build" / "lambda"
    extra = project / "requirements-workflows.txt"

    built = build_asset.build(
        out,
        "examples.order",
        root=project,
        requirement_files=[extra],
        run=lambda command, **kwargs: calls.append((command, kwargs)),
    )

    assert built == out.resolve()
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [
        ".weft-asset",
        "examples/__init__.py",
        "examples/order.py",
        "handlers/api.py",
        "handlers/maintenance.py",
        "weft_serverless/__init__.py",
    ]
    assert calls == [
        (
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--target",
                str(out.resolve()),
                "--platform",
                "manylinux2014_aarch64",
                "--only-binary=:all:",
                "--python-version",
                names.PYTHON_VERSION,
                "--implementation",
                "cp",
                "--no-compile",
                "aws-lambda-powertools>=3.0",
                "msgpack>=1.0.7",
                "--requirement",
                str(extra),
            ],
            {"check": True},
        )
    ]


def test_rebuild_replaces_a_previous_build(build_asset: Any, project: Path) -> None:
    out = project / "build" / "lambda"
    build_asset.build(out, "examples.order", root=project, run=lambda *a, **k: None)
    (out / "stale.py").write_text("")
    build_asset.build(out, "examples.order", root=project, run=lambda *a, **k: None)
    assert not (out / "stale.py").exists()


@pytest.mark.parametrize(
    ("out", "module", "message"),
    [
        ("notes", "examples.order", "not made by build_asset.py"),
        (".", "examples.order", "it contains the project"),
        ("build/lambda", "shop.flows", "no package or module 'shop'"),
    ],
)
def test_build_refuses_to_clobber_or_guess(
    build_asset: Any, project: Path, out: str, module: str, message: str
) -> None:
    (project / "notes").mkdir()
    (project / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match=message):
        build_asset.build(project / out, module, root=project, run=lambda *a, **k: None)
    assert (project / "notes" / "keep.txt").read_text() == "mine"


def test_runtime_requirements_come_from_pyproject_without_boto3(build_asset: Any) -> None:
    requirements = build_asset.runtime_requirements(ROOT / "pyproject.toml")
    assert requirements
    assert not [r for r in requirements if r.lower().startswith(("boto3", "botocore"))]
