"""The container's engine: built from the environment once, reused by every invocation,
and never paid for at ``import weft_serverless``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from aws_support import Api, FakeMonotonic, reply_of, rest_event, scheduled_event
from dynamodb_support import MotoEnvironment, new_table

from weft_serverless import ConfigurationError, Engine, MemoryStorage
from weft_serverless.aws import (
    LocalContext,
    build_engine,
    get_engine,
    lambda_invocation,
    load_workflows,
    make_api_handler,
    make_maintenance_handler,
    reset_engine,
)
from weft_serverless.aws import runtime as aws_runtime
from weft_serverless.storage import keys

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def from_env(monkeypatch: pytest.MonkeyPatch, dynamodb_table: str) -> None:
    monkeypatch.setenv("WEFT_TABLE_NAME", dynamodb_table)
    monkeypatch.setenv("WEFT_WORKFLOWS_MODULE", "aws_flows")
    monkeypatch.delenv("WEFT_DYNAMODB_ENDPOINT", raising=False)
    monkeypatch.delenv("WEFT_OWNERSHIP", raising=False)


def test_the_engine_is_built_once_per_container(
    from_env: None, monkeypatch: pytest.MonkeyPatch, moto: MotoEnvironment
) -> None:
    built: list[Engine] = []
    create = Engine.create.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Engine], *args: Any, **kwargs: Any) -> Engine:
        built.append(create(cls, *args, **kwargs))
        return built[-1]

    monkeypatch.setattr(Engine, "create", classmethod(counting))
    monotonic = FakeMonotonic()
    api = make_api_handler(sleep=monotonic.sleep, monotonic=monotonic)
    maintenance = make_maintenance_handler(monotonic=monotonic)
    assert built == []  # nothing is built at import (handler build) time

    start = rest_event("POST", "/workflows", {"workflow_type": "greeter", "id": "g", "input": 1})
    assert reply_of(api(start, LocalContext(29, monotonic))).status == 201
    assert (
        reply_of(api(rest_event("GET", "/workflows/g"), LocalContext(29, monotonic))).status == 200
    )
    maintenance(scheduled_event(), LocalContext(55, monotonic))

    assert len(built) == 1
    assert get_engine() is built[0]
    assert built[0].runtime.fence.mode == "workflow-lease"


def test_reset_engine_models_a_new_container(from_env: None) -> None:
    first = get_engine()
    reset_engine()
    assert get_engine() is not first


def test_build_arguments_after_the_engine_exists_are_refused(from_env: None) -> None:
    get_engine()
    with pytest.raises(ConfigurationError, match="reset_engine"):
        get_engine(storage=MemoryStorage())


def test_ownership_comes_from_the_environment(
    from_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEFT_OWNERSHIP", "none")
    engine = build_engine(storage=MemoryStorage())
    assert engine.runtime.fence.mode == "none"
    assert engine.runtime.background_tasks == "manual"


def test_shard_counts_come_from_the_environment(
    from_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEFT_SHARDS", "timers=16,claims=8")
    storage = MemoryStorage()
    engine = build_engine(storage=storage)
    assert (engine.runtime.shards.timers, engine.runtime.shards.claims) == (16, 8)
    assert engine.runtime.shards.status == 4
    assert storage.get(keys.meta_key(keys.LAYOUT)) is not None  # the table now keeps them
    monkeypatch.setenv("WEFT_SHARDS", "timers=32")  # a redeploy with other counts: refused
    with pytest.raises(ConfigurationError, match="created with"):
        build_engine(storage=storage)
    monkeypatch.setenv("WEFT_SHARDS", "timers=lots")
    with pytest.raises(ConfigurationError, match="timers=16,claims=16"):
        build_engine(storage=MemoryStorage())


def test_new_store_shards_apply_to_a_new_table_and_leave_older_tables_as_they_are(
    from_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The construct's default counts rose: a table it creates takes them, a table created
    before (its marker, or items under the defaults without one) keeps its own."""
    monkeypatch.setenv("WEFT_NEW_STORE_SHARDS", "timers=16,claims=16")
    fresh = MemoryStorage()
    engine = build_engine(storage=fresh)
    assert (engine.runtime.shards.timers, engine.runtime.shards.claims) == (16, 16)
    assert build_engine(storage=fresh).runtime.shards.timers == 16  # the marker now says so

    older = MemoryStorage()  # a table created before the defaults rose, with a run on it
    monkeypatch.delenv("WEFT_NEW_STORE_SHARDS")
    with build_engine(storage=older).invocation(time_left=lambda: 60.0) as old:
        old.start("greeter", 1, id="before")
    assert older.get(keys.meta_key(keys.LAYOUT)) is None
    monkeypatch.setenv("WEFT_NEW_STORE_SHARDS", "timers=16,claims=16")
    reopened = build_engine(storage=older)
    assert reopened.runtime.shards.timers == 4
    assert reopened.describe("before").status in ("running", "completed")

    marked = MemoryStorage()
    monkeypatch.setenv("WEFT_SHARDS", "timers=8")
    build_engine(storage=marked)
    monkeypatch.delenv("WEFT_SHARDS")
    assert build_engine(storage=marked).runtime.shards.timers == 8  # its marker wins


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("", "WEFT_WORKFLOWS_MODULE"),
        ("no_such_module_here", "cannot be imported"),
        ("aws_support", "must export `workflows`"),
    ],
)
def test_a_bad_workflows_module_is_a_clear_configuration_error(module: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_workflows(module)


def test_a_missing_table_name_is_a_clear_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WEFT_TABLE_NAME", raising=False)
    monkeypatch.setenv("WEFT_WORKFLOWS_MODULE", "aws_flows")
    with pytest.raises(ConfigurationError, match="WEFT_TABLE_NAME"):
        build_engine()


def test_handlers_on_moto_over_http_configured_by_endpoint(
    monkeypatch: pytest.MonkeyPatch, moto: MotoEnvironment, moto_server: str
) -> None:
    table = new_table(moto.client(http=True))
    monkeypatch.setenv("WEFT_TABLE_NAME", table)
    monkeypatch.setenv("WEFT_DYNAMODB_ENDPOINT", moto_server)
    monkeypatch.setenv("WEFT_WORKFLOWS_MODULE", "aws_flows")
    try:
        monotonic = FakeMonotonic()
        api = make_api_handler(sleep=monotonic.sleep, monotonic=monotonic)
        event = rest_event("POST", "/workflows", {"workflow_type": "approval", "id": "h"})
        assert reply_of(api(event, LocalContext(29, monotonic))).status == 201
        signal = rest_event("POST", "/workflows/h/signals/approve", {"payload": "yes"})
        assert reply_of(api(signal, LocalContext(29, monotonic))).body["status"] == "completed"
        assert get_engine().runtime.storage._endpoint_url == moto_server  # type: ignore[attr-defined]
    finally:
        reset_engine()
        moto.client(http=True).delete_table(TableName=table)


def test_step_reserve_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEFT_STEP_RESERVE_SECONDS", "-1")
    with pytest.raises(ConfigurationError, match="WEFT_STEP_RESERVE_SECONDS"):
        make_api_handler()
    assert aws_runtime.seconds_from_env("X", 3.0, {"X": "4.5"}) == 4.5


def test_step_reserve_value_from_the_environment_is_used(
    monkeypatch: pytest.MonkeyPatch, engine: Engine, monotonic: FakeMonotonic
) -> None:
    """A start waiting for its result waits only until the reserve is left: 6 s - 4 s."""
    monkeypatch.setenv("WEFT_STEP_RESERVE_SECONDS", "4")
    api = Api(make_api_handler(sleep=monotonic.sleep, monotonic=monotonic), monotonic)
    body = {"workflow_type": "napper", "input": 60, "wait_seconds": 25}
    api("POST", "/workflows", body, timeout=6.0)
    assert sum(monotonic.sleeps) == 2.0


def _run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    return result.stdout.strip()


HEAVY = ("boto3", "botocore", "aws_lambda_powertools", "aws_cdk", "moto")


def test_import_weft_serverless_loads_no_aws_library() -> None:
    out = _run(
        f"""
        import sys
        import weft_serverless
        from weft_serverless import Engine, MemoryStorage, workflow

        def flow(ctx, x):
            return (yield ctx.run("double", x))

        wf = workflow("flow").activities(double=lambda x: x * 2).execute(flow)
        engine = Engine.create(MemoryStorage(), {{"flow": wf}}, background_tasks="manual")
        assert engine.start("flow", 21).result() == 42
        import weft_serverless.aws  # the Lambda layer is light to import, too
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
        print(",".join(loaded) or "none")
        """
    )
    assert out == "none"


def test_handler_modules_import_without_configuration_or_boto3() -> None:
    out = _run(
        """
        import sys
        import handlers.api, handlers.maintenance
        assert callable(handlers.api.handler) and callable(handlers.maintenance.handler)
        print("boto3" in sys.modules, "aws_lambda_powertools" in sys.modules)
        """
    )
    assert out == "False True"  # boto3 loads with the engine, on the first invocation


def test_the_scope_bounds_storage_retries_by_the_lambda_deadline(
    engine: Engine, monotonic: FakeMonotonic
) -> None:
    storage = engine.runtime.storage
    assert storage.time_budget is None  # type: ignore[attr-defined]
    with lambda_invocation(engine, LocalContext(10, monotonic)) as invocation:
        assert invocation.time_left() == 10.0
        assert storage.time_budget() == pytest.approx(9.5)  # type: ignore[attr-defined]
        monotonic.advance(4)
        assert storage.time_budget() == pytest.approx(5.5)  # type: ignore[attr-defined]
        assert engine.runtime.time_left is not None
    assert storage.time_budget is None  # type: ignore[attr-defined]
    assert engine.runtime.time_left is None
