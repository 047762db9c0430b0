"""Services: ``Engine.create(services=factory)`` builds activity clients once per engine.

Rules pinned here: the factory runs once per engine, lazily, the first time an attempt asks
for ``current_activity().services``; never at ``Engine.create``, never while a run replays
its recorded steps, never for an attempt that does not ask; concurrent first asks run it
once. A factory that raises or returns something other than a mapping of names fails that
attempt with ``ServicesUnavailableError``, which is retried, and the retry calls the factory
again. A name the services lack is an ``UnknownServiceError`` (a ``KeyError``), not retried.
``activity(fn, services=(...))`` declares what an activity needs: without a factory,
``Engine.create`` refuses it (``MissingServiceError``) before any write; with one, an
attempt whose activity declares a name the built services lack fails on its first ask.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from feature_support import Opener, make_engine

from weft_serverless import (
    ActivityContext,
    Engine,
    InvalidArgumentError,
    MemoryStorage,
    MissingServiceError,
    RetryPolicy,
    ServicesUnavailableError,
    SQLiteStorage,
    UnknownServiceError,
    WorkflowDefinition,
    WorkflowFailedError,
    activity,
    current_activity,
    workflow,
)
from weft_serverless.aws import build_engine
from weft_serverless.cli import main as cli_main
from weft_serverless.testing import CrashingStorage, TestEngine

RETRY = RetryPolicy(max_attempts=3, initial_backoff=1.0, backoff_multiplier=1.0)


class Factory:
    """A services factory that counts its calls; ``fail_first`` calls raise."""

    def __init__(self, services: Any = None, fail_first: int = 0) -> None:
        self.services = {"s3": "s3-client"} if services is None else services
        self.fail_first = fail_first
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            self.calls += 1
            calls = self.calls
        if calls <= self.fail_first:
            raise ConnectionError(f"no route to the service (call {calls})")
        return self.services


def _upload(key: Any) -> str:
    return f"{current_activity().services['s3']}:{key}"


def _plain(key: Any) -> str:
    return f"plain:{key}"


def _upload_twice(ctx: Any, key: Any) -> Any:
    first = yield ctx.run("upload", key, retry=RETRY)
    second = yield ctx.run("upload", f"{key}-2", retry=RETRY)
    return [first, second]


def _defs(body: Any = _upload_twice, **activities: Any) -> dict[str, WorkflowDefinition]:
    declared = activities or {"upload": activity(_upload, services=("s3",)), "plain": _plain}
    return {"store": workflow("store").activities(**declared).execute(body)}


def _failures(te: TestEngine, workflow_id: str) -> list[tuple[int, str]]:
    described = te.describe(workflow_id, attempts=True)
    return [(f["attempt"], f["error_type"]) for f in described.failed_attempts or ()]


def test_the_factory_runs_once_per_engine_lazily_over_many_runs_and_attempts(
    storage_factory: Opener,
) -> None:
    """Not at create; once at the first ask; then three runs of two asking steps each and a
    failed attempt's retry all reuse what it built."""
    factory = Factory()
    flaky = {"left": 1}

    def upload(key: Any) -> str:
        client = current_activity().services["s3"]
        if flaky["left"]:
            flaky["left"] -= 1
            raise TimeoutError("slow disk")
        return f"{client}:{key}"

    te = make_engine(
        storage_factory, _defs(upload=activity(upload, services=("s3",))), services=factory
    )
    assert factory.calls == 0
    handle = te.start("store", "a", id="r-0")
    assert factory.calls == 1  # the first attempt asked, then failed
    te.advance(1)
    assert handle.result() == ["s3-client:a", "s3-client:a-2"]
    assert _failures(te, "r-0") == [(1, "TimeoutError")]
    for n in range(1, 3):
        assert te.start("store", n, id=f"r-{n}").result() == [f"s3-client:{n}", f"s3-client:{n}-2"]
    assert factory.calls == 1


def test_an_attempt_that_does_not_ask_never_builds_the_services(storage_factory: Opener) -> None:
    factory = Factory()

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("plain", key))

    te = make_engine(storage_factory, _defs(body), services=factory)
    assert te.start("store", "x", id="r").result() == "plain:x"
    assert factory.calls == 0


def test_a_replay_of_recorded_steps_does_not_build_the_services(storage_factory: Opener) -> None:
    """Engine A runs the asking step; a fresh engine (a new process, its own factory) that
    recovers the run, replays that step and finishes with a step that does not ask, never
    calls its factory."""
    first = Factory()

    def body(ctx: Any, key: Any) -> Any:
        uploaded = yield ctx.run("upload", key)
        go = yield ctx.wait_for_signal("go")
        return [uploaded, (yield ctx.run("plain", go))]

    te = make_engine(storage_factory, _defs(body), services=first)
    te.start("store", "k", id="r")
    assert first.calls == 1
    te.crash()
    second = Factory()
    fresh = make_engine(storage_factory, _defs(body), services=second)  # recovers the run
    fresh.signal("r", "go", "now")
    assert fresh.describe("r").result == ["s3-client:k", "plain:now"]
    assert second.calls == 0


def test_concurrent_first_asks_run_the_factory_once(storage_factory: Opener) -> None:
    """Two runs driven at once from two threads ask together (a barrier lets only
    concurrent attempts pass); the factory, which would let two concurrent builds meet at
    its own barrier, is entered once, and both attempts get what it built."""
    together = threading.Barrier(2, timeout=10)
    builds = threading.Barrier(2, timeout=0.3)
    built: list[Mapping[str, Any]] = []

    def factory() -> Mapping[str, Any]:
        services = {"s3": object()}
        built.append(services)
        with contextlib.suppress(threading.BrokenBarrierError):
            builds.wait()  # passes only if a second build runs at the same time
        return services

    def upload(key: Any) -> Any:
        together.wait()
        return id(current_activity().services["s3"])

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key))

    te = make_engine(storage_factory, _defs(body, upload=upload), services=factory)
    results: dict[str, Any] = {}

    def start(workflow_id: str) -> None:
        results[workflow_id] = te.start("store", workflow_id, id=workflow_id).result()

    threads = [threading.Thread(target=start, args=(f"r-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(built) == 1
    assert results == {"r-0": id(built[0]["s3"]), "r-1": id(built[0]["s3"])}


def test_a_factory_error_fails_the_attempt_and_the_retry_builds_again(
    storage_factory: Opener,
) -> None:
    factory = Factory(fail_first=1)
    raised: list[BaseException] = []

    def upload(key: Any) -> str:
        try:
            return _upload(key)
        except ServicesUnavailableError as exc:
            raised.append(exc)
            raise

    te = make_engine(
        storage_factory, _defs(upload=activity(upload, services=("s3",))), services=factory
    )
    handle = te.start("store", "a", id="r")
    assert factory.calls == 1
    assert te.describe("r").status == "running"
    assert _failures(te, "r") == [(1, "ServicesUnavailableError")]
    message = te.describe("r", attempts=True).failed_attempts[0]["message"]  # type: ignore[index]
    assert "raised ConnectionError: no route to the service (call 1)" in message
    assert "retried" in message
    assert [type(exc.__cause__) for exc in raised] == [ConnectionError]
    te.advance(1)
    assert handle.result() == ["s3-client:a", "s3-client:a-2"]
    assert factory.calls == 2  # the failed build was not kept; the success was


@pytest.mark.parametrize(
    ("returned", "complaint"),
    [
        (["s3"], "returned list, not a mapping"),
        ({1: "client"}, "keys that are not non-empty names"),
        ({"": "client"}, "keys that are not non-empty names"),
    ],
)
def test_a_factory_returning_no_mapping_of_names_fails_the_attempt(
    storage_factory: Opener, returned: Any, complaint: str
) -> None:
    """Retried per policy (three attempts, the factory called on each), then the run fails."""
    factory = Factory(services=returned)

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key, retry=RETRY))

    te = make_engine(storage_factory, _defs(body), services=factory)
    handle = te.start("store", "a", id="r")
    te.advance(1)
    te.advance(1)
    with pytest.raises(WorkflowFailedError):
        handle.result()
    assert factory.calls == 3
    assert _failures(te, "r") == [(n, "ServicesUnavailableError") for n in (1, 2, 3)]
    error = te.describe("r").error or {}
    assert complaint in str(error.get("message"))


def test_an_unknown_service_is_a_typed_error_that_is_not_retried(storage_factory: Opener) -> None:
    """``services["db"]`` when the factory built only ``s3``: one attempt, and the message
    names what the factory provides; ``get`` and ``in`` work as on any mapping."""
    seen: dict[str, Any] = {}

    def query(key: Any) -> Any:
        services = current_activity().services
        seen.update(get=services.get("db"), has="db" in services, names=sorted(services))
        try:
            return services["db"]
        except UnknownServiceError as exc:
            seen["error"] = exc
            raise

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("query", key, retry=RETRY))

    factory = Factory()
    te = make_engine(storage_factory, _defs(body, query=query), services=factory)
    handle = te.start("store", "a", id="r")
    with pytest.raises(WorkflowFailedError):
        handle.result()
    error = seen.pop("error")
    assert seen == {"get": None, "has": False, "names": ["s3"]}
    assert isinstance(error, KeyError)
    assert (error.activity, error.missing, error.provided) == ("query", ["db"], ["s3"])
    assert str(error).startswith("activity 'query' needs")  # not quoted like a bare KeyError
    assert _failures(te, "r") == [(1, "UnknownServiceError")]
    message = te.describe("r", attempts=True).failed_attempts[0]["message"]  # type: ignore[index]
    assert "needs service(s) 'db'" in message and "provides 's3'" in message


def test_a_declared_service_the_factory_lacks_fails_the_first_ask(storage_factory: Opener) -> None:
    """``services=("s3", "queue")`` against a factory building ``s3`` only: the attempt
    fails when it asks, even for ``s3``, and is not retried."""

    def upload(key: Any) -> Any:
        return current_activity().services["s3"]

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key, retry=RETRY))

    defs = _defs(body, upload=activity(upload, services=("s3", "queue")))
    factory = Factory()
    te = make_engine(storage_factory, defs, services=factory)
    with pytest.raises(WorkflowFailedError):
        te.start("store", "a", id="r").result()
    assert factory.calls == 1
    assert _failures(te, "r") == [(1, "UnknownServiceError")]
    message = te.describe("r", attempts=True).failed_attempts[0]["message"]  # type: ignore[index]
    assert "activity 'upload' needs service(s) 'queue'" in message


def test_without_a_factory_a_declared_service_fails_engine_create(storage_factory: Opener) -> None:
    """Refused at create, naming workflow, activity and service, before any write."""
    store = CrashingStorage(storage_factory())
    with pytest.raises(MissingServiceError) as raised:
        TestEngine(_defs(), storage=store)
    assert (raised.value.workflow, raised.value.activity, raised.value.service) == (
        "store",
        "upload",
        "s3",
    )
    assert "workflow 'store': activity 'upload' declares service 's3'" in str(raised.value)
    assert store.writes == 0


def test_without_a_factory_asking_for_a_service_is_an_unknown_service(
    storage_factory: Opener,
) -> None:
    """An undeclared ask on an engine with no factory: the services are empty."""

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key, retry=RETRY))

    te = make_engine(storage_factory, _defs(body, upload=_upload))
    with pytest.raises(WorkflowFailedError):
        te.start("store", "a", id="r").result()
    assert _failures(te, "r") == [(1, "UnknownServiceError")]


def test_an_async_activity_gets_the_services(storage_factory: Opener) -> None:
    async def upload(key: Any) -> Any:
        return f"{current_activity().services['s3']}:{key}"

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key))

    factory = Factory()
    te = make_engine(storage_factory, _defs(body, upload=upload), services=factory)
    assert te.start("store", "a", id="r").result() == "s3-client:a"
    assert factory.calls == 1


def test_bad_services_values_are_refused(storage_factory: Opener) -> None:
    """At ``activity(...)`` and at ``Engine.create``, with the field named, before any write."""
    for bad in ("s3", b"s3", ("s3", ""), ("s3", 1), {"s3": 1}, 42, None):
        with pytest.raises(InvalidArgumentError) as raised:
            activity(_upload, services=bad)  # type: ignore[arg-type]
        assert raised.value.field == "services", bad
    assert activity(_upload, services=["s3", "db", "s3"]).services == ("s3", "db")
    store = CrashingStorage(storage_factory())
    for bad_factory in (42, {"s3": "client"}, "s3"):
        with pytest.raises(InvalidArgumentError) as raised:
            Engine.create(store, _defs(), services=bad_factory)  # type: ignore[arg-type]
        assert raised.value.field == "services"
    assert store.writes == 0


def test_a_context_built_by_hand_has_no_services() -> None:
    context = ActivityContext("wf", "upload", 1, "00000000")
    with pytest.raises(InvalidArgumentError):
        context.services  # noqa: B018
    context.provide_services = lambda: {"s3": "fake"}
    assert context.services["s3"] == "fake"


def test_a_factory_that_asks_for_services_itself_gets_an_error(storage_factory: Opener) -> None:
    """No deadlock: the inner ask fails the build, the attempt fails and is retried."""

    def factory() -> Mapping[str, Any]:
        return dict(current_activity().services)

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key, retry=RetryPolicy(max_attempts=1)))

    te = make_engine(storage_factory, _defs(body), services=factory)
    with pytest.raises(WorkflowFailedError):
        te.start("store", "a", id="r").result()
    error = te.describe("r").error or {}
    assert error["type"] == "ActivityFailedError"
    assert "ServicesUnavailableError" in error["message"]
    assert "the services factory itself asked for services" in error["message"]


SERVICES_MODULE = """
from weft_serverless import activity, current_activity, workflow

built = []


def services():
    built.append(1)
    return {"s3": "s3-client"}


def upload(key):
    return f"{current_activity().services['s3']}:{key}"


def body(ctx, key):
    go = yield ctx.wait_for_signal("go")
    return (yield ctx.run("upload", f"{key}-{go}"))


workflows = {
    "store": workflow("store").activities(upload=activity(upload, services=("s3",))).execute(body)
}
"""


@pytest.fixture
def services_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A workflows module that exports ``services`` too (its activity declares ``s3``)."""
    name = f"svc_flows_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(SERVICES_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def test_the_lambda_engine_takes_services_from_the_workflows_module(services_module: Any) -> None:
    """``WEFT_WORKFLOWS_MODULE`` may export ``services`` beside ``workflows``: the container's
    engine gets it, unbuilt until an activity asks."""
    environ = {"WEFT_WORKFLOWS_MODULE": services_module.__name__, "WEFT_OWNERSHIP": "none"}
    engine = build_engine(environ, storage=MemoryStorage())
    engine.start("store", "a", id="r")
    assert services_module.built == []
    engine.signal("r", "go", 1)
    assert engine.describe("r").result == "s3-client:a-1"
    assert services_module.built == [1]
    engine.close()


def test_the_operator_cli_builds_its_engine_with_the_modules_services(
    services_module: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``weft signal --workflows MODULE`` drives the woken run inline: its engine takes the
    module's ``services`` (without them, ``Engine.create`` would refuse the declaration)."""
    path = tmp_path / "weft.db"
    with Engine.create(
        SQLiteStorage(path),
        services_module.workflows,
        background_tasks="manual",
        services=services_module.services,
    ) as engine:
        engine.start("store", "a", id="r")
    argv = ["signal", "r", "go", "--payload", "2", "--json", "--db", str(path)]
    status = cli_main([*argv, "--workflows", services_module.__name__])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert json.loads(out)["status"] == "completed"
    assert services_module.built == [1]


def test_a_test_double_keeps_the_declared_services(storage_factory: Opener) -> None:
    """``TestEngine.mock`` replaces the function, not the declaration: a declared name the
    factory lacks still fails the mock's first ask."""

    def body(ctx: Any, key: Any) -> Any:
        return (yield ctx.run("upload", key, retry=RETRY))

    defs = _defs(body, upload=activity(_upload, services=("s3", "queue")))
    te = make_engine(storage_factory, defs, services=Factory())
    te.mock("upload", lambda key: current_activity().services["s3"])
    with pytest.raises(WorkflowFailedError):
        te.start("store", "a", id="r").result()
    assert _failures(te, "r") == [(1, "UnknownServiceError")]
