"""Shared test setup: an AWS-less environment and the registry of storage backends.

``BACKENDS`` maps a name to a setup function. It is called once per test with the test's
``request`` and ``tmp_path``, prepares an empty store (a file, a table, an object), registers
any cleanup with ``request.addfinalizer``, and returns an *opener*: a zero-argument callable
returning a ``Storage`` handle on that store. Every handle an opener returns sees the same
data; backends that can, return a fresh handle each time (SQLite reopens the file), which lets a
test simulate a process restart. Adding a backend is one entry in ``BACKENDS``.

``--storage=memory,sqlite`` restricts the run to those backends: tests using
``storage_factory`` or ``storage`` run once per selected backend, and classes marked
``@pytest.mark.storage("name")`` are deselected unless ``name`` is selected. A test marked
``@pytest.mark.backends("memory", "sqlite")`` is generated for those backends only.
"""

from __future__ import annotations

import logging
import os

# Set before anything can build a boto3 client, so no test can reach a real AWS account.
os.environ.update(
    AWS_DEFAULT_REGION="us-east-1",
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_SESSION_TOKEN="testing",
)
os.environ.pop("AWS_PROFILE", None)

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dynamodb_support import DYNAMODB_BACKENDS

from weft_serverless.storage.base import Storage
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.storage.sqlite import SQLiteStorage

Opener = Callable[[], Storage]
BackendSetup = Callable[[pytest.FixtureRequest, Path], Opener]


def memory_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """One ``MemoryStorage`` per test; every open returns that same object."""
    store = MemoryStorage()
    return lambda: store


def sqlite_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """A file in the test's directory; every open is a new connection, like a restart."""
    path = tmp_path / "weft.db"
    return lambda: SQLiteStorage(path)


BACKENDS: dict[str, BackendSetup] = {
    "memory": memory_backend,
    "sqlite": sqlite_backend,
    **DYNAMODB_BACKENDS,  # "dynamodb" (moto in-process), "dynamodb-http" (moto's server)
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--storage",
        default=None,
        help=f"comma-separated storage backends to test (default: all of {', '.join(BACKENDS)})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "storage(name): the test is bound to one backend; --storage can deselect it"
    )
    config.addinivalue_line(
        "markers",
        "backends(*names): a storage_factory test runs on these backends only (too slow, or "
        "meaningless, on the others)",
    )
    selected_backends(config)  # fail fast on a misspelt --storage


def selected_backends(config: pytest.Config) -> list[str]:
    """The backend names ``--storage`` selects, in registry order."""
    option = config.getoption("--storage")
    if not option:
        return list(BACKENDS)
    names = {name.strip() for name in option.split(",") if name.strip()}
    unknown = sorted(names - BACKENDS.keys())
    if unknown:
        raise pytest.UsageError(
            f"--storage: unknown backend(s) {', '.join(unknown)}; known: {', '.join(BACKENDS)}"
        )
    return [name for name in BACKENDS if name in names]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage_backend" in metafunc.fixturenames:
        names = selected_backends(metafunc.config)
        only = metafunc.definition.get_closest_marker("backends")
        if only is not None:  # a test meaningful (or affordable) on some backends only
            names = [name for name in names if name in only.args]
        metafunc.parametrize("storage_backend", names, indirect=True, ids=names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = set(selected_backends(config))
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("storage")
        (dropped if marker is not None and marker.args[0] not in selected else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def storage_backend(request: pytest.FixtureRequest) -> str:
    """The registry name of the backend this test runs on (parametrised by the hook above)."""
    name: str = request.param
    return name


@pytest.fixture
def storage_factory(
    request: pytest.FixtureRequest, storage_backend: str, tmp_path: Path
) -> Iterator[Opener]:
    """Open handles on this test's store; all of them are closed when the test ends.

    Calling it twice returns two handles on the same data: the same object for memory, a
    reopened file for SQLite. Handles may be closed by the test; ``close`` is idempotent.
    """
    opener = BACKENDS[storage_backend](request, tmp_path)
    opened: list[Storage] = []

    def open_storage() -> Storage:
        handle = opener()
        if all(handle is not seen for seen in opened):
            opened.append(handle)
        return handle

    yield open_storage
    for handle in reversed(opened):
        handle.close()


@pytest.fixture
def storage(storage_factory: Opener) -> Storage:
    """A fresh, empty store on each selected backend."""
    return storage_factory()


@pytest.fixture(autouse=True)
def _engine_logging_as_found() -> Iterator[None]:
    """Leave the engine's logging tree as the test found it. The Lambda handlers route the
    ``weft_serverless`` loggers through powertools' JSON handler for the whole process; a test
    that ran one must not make a later test in the same worker print engine lines (a CLI test
    that reads stderr failed so when the suite ran on several cores)."""
    engine = logging.getLogger("weft_serverless")
    handlers, level, propagate = list(engine.handlers), engine.level, engine.propagate
    yield
    engine.handlers, engine.propagate = handlers, propagate
    engine.setLevel(level)
