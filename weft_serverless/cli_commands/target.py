"""Which store an operator command talks to, and the engine it uses there.

A command targets a SQLite file (``--db``) or a DynamoDB table (``--table``, or
``WEFT_TABLE_NAME``; ``--endpoint-url`` or ``WEFT_DYNAMODB_ENDPOINT`` for moto or DynamoDB
Local). The engine it builds never recovers or runs background work: an operator command must
not start driving somebody else's workflows as a side effect.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from weft_serverless.loopback import LOOPBACK_NAMES

if TYPE_CHECKING:
    from weft_serverless import Engine
    from weft_serverless.storage.base import Storage
    from weft_serverless.workflow import WorkflowDefinition

LOCAL_REGION = "us-east-1"


class UsageError(Exception):
    """The command line is incomplete or contradictory; ``weft`` exits 2 with the message."""


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every operator command shares to name its store."""
    group = parser.add_argument_group("store (a SQLite file, or a DynamoDB table)")
    group.add_argument("--db", metavar="PATH", help="SQLite file written by an engine")
    group.add_argument("--table", metavar="NAME", help="DynamoDB table (default: $WEFT_TABLE_NAME)")
    group.add_argument(
        "--endpoint-url",
        metavar="URL",
        help="DynamoDB endpoint, e.g. weft dev's moto (default: $WEFT_DYNAMODB_ENDPOINT)",
    )
    group.add_argument("--region", help="AWS region (default: the AWS environment)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def open_storage(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Storage:
    """Open the store the arguments name; a missing SQLite file is an error, not a new file."""
    env = os.environ if environ is None else environ
    if args.db:
        if args.table or args.endpoint_url:
            raise UsageError("pass --db PATH or --table NAME, not both")
        path = Path(args.db)
        if not path.is_file():
            from weft_serverless.errors import ConfigurationError

            raise ConfigurationError(f"no SQLite file at {path}; check --db")
        from weft_serverless.storage.sqlite import SQLiteStorage

        return SQLiteStorage(path)
    from weft_serverless.storage.dynamodb_schema import ENDPOINT_URL_ENV, TABLE_NAME_ENV

    table = args.table or env.get(TABLE_NAME_ENV)
    if not table:
        raise UsageError(f"name a store: --db PATH, or --table NAME (or set {TABLE_NAME_ENV})")
    endpoint = args.endpoint_url or env.get(ENDPOINT_URL_ENV) or None
    region = args.region
    if endpoint is not None and urlparse(endpoint).hostname in LOOPBACK_NAMES:
        region = region or _local_defaults()
    from weft_serverless.storage.dynamodb import DynamoDBStorage

    # from_env also picks up WEFT_OFFLOAD_BUCKET, so values offloaded to S3 can be read.
    return DynamoDBStorage.from_env(
        {**env, TABLE_NAME_ENV: table}, region=region, endpoint_url=endpoint
    )


def _local_defaults() -> str:
    """A local endpoint (moto) needs some credentials and a region; supply fakes if unset.

    Real credentials are left alone when present; moto accepts any.
    """
    if not (os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")):
        os.environ["AWS_ACCESS_KEY_ID"] = "testing"
        os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or LOCAL_REGION


@contextmanager
def operator_engine(
    args: argparse.Namespace,
    *,
    writes: bool = False,
    workflows: Mapping[str, WorkflowDefinition] | None = None,
) -> Iterator[Engine]:
    """An engine on the target store, closed (with its storage) on exit.

    Reads use a read-only engine, which claims nothing, writes nothing and works on a store
    of any mode (a mode ``none`` engine is refused on a fenced store); given ``workflows``
    it can answer queries. Writes use the store's
    own mode, so they carry the fence the store's engines expect (under workflow-lease a
    cancel rotates the workflow's epoch, deposing its owner).
    """
    import uuid

    from weft_serverless import Engine, stored_ownership_mode

    storage = open_storage(args)
    engine_id = f"weft-cli-{uuid.uuid4().hex[:12]}"
    try:
        if writes:
            engine = Engine.create(
                storage,
                dict(workflows or {}),
                ownership=stored_ownership_mode(storage),
                background_tasks="manual",
                recover=False,
                engine_id=engine_id,
                services=module_services(args) if workflows else None,
            )
        else:
            engine = reader_engine(storage, engine_id, workflows)
        try:
            yield engine
        finally:
            engine.close()
    finally:
        storage.close()


def load_workflows(module_name: str) -> dict[str, Any]:
    """The ``workflows`` dict of a module named on the command line (cwd importable)."""
    import importlib

    from weft_serverless.errors import ConfigurationError

    make_workflows_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import workflows module {module_name!r}: {exc}") from None
    registry = getattr(module, "workflows", None)
    if not isinstance(registry, dict):
        raise ConfigurationError(f"module {module_name!r} has no 'workflows' dict")
    return registry


def make_workflows_importable() -> None:
    """Put the cwd first on ``sys.path`` (as ``python -m`` does), then the source tree beside
    the package: the default ``examples.workflows`` of ``weft dev`` ships there, not in
    wheels, so the module names its banner prints import from any directory."""
    import sys

    source_tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if source_tree not in sys.path:
        sys.path.append(source_tree)


def module_services(args: argparse.Namespace) -> Any:
    """The ``services`` factory the ``--workflows`` module may export beside ``workflows``
    (its activities may declare services; the engine builds them only if one asks)."""
    import importlib

    module_name = getattr(args, "workflows", None)
    return getattr(importlib.import_module(module_name), "services", None) if module_name else None


def reader_engine(
    storage: Storage,
    engine_id: str,
    workflows: Mapping[str, WorkflowDefinition] | None = None,
) -> Engine:
    """An engine that only reads: no marker check, no claim, and any write it tries fails.

    With ``workflows`` it can also answer queries (they replay the run's code in memory).
    """
    from weft_serverless import read_only_engine

    return read_only_engine(storage, engine_id, workflows)
