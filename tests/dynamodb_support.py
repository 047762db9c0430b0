"""DynamoDB (and S3) for tests, with no AWS account: moto in-process and moto's HTTP server.

Both modes share one process-wide moto, started on first use and stopped when the test
session ends, and each test gets a fresh, small table that is deleted afterwards (moto's
``TransactWriteItems`` slows down as a table grows, and a session-scoped mock costs ~10 ms
per test where a function-scoped one costs ~240 ms).

Backends for the registry in ``tests/conftest.py``:

* ``dynamodb``: in-process ``mock_aws`` (botocore requests never leave the process);
* ``dynamodb-http``: moto's server on a free 127.0.0.1 port, reached over real HTTP.

Why everything goes through one lock: moto is NOT atomic under concurrent requests (its
models hold no lock, and a threaded server serves requests in parallel; lost updates were
measured in both modes). Serialising moto makes it behave like one linearizable DynamoDB,
so a concurrency test that passes proves the adapter's conditional writes are right, not
that the threads happened not to interleave inside moto.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from weft_serverless import testing_moto
from weft_serverless.storage.base import Storage
from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

REGION = "us-east-1"
Opener = Callable[[], Storage]

# One lock for both modes: the in-process mock and the server share moto's backends. It is the
# lock ``weft_serverless.testing.serialise_moto`` holds around every in-process request.
MOTO_LOCK = testing_moto.MOTO_LOCK
# botocore calls every before-send handler, so a request a fault hook answered would still reach
# moto's stubber; the hook marks it and the stubber (wrapped below) skips it.
ANSWERED_BY_FAULT = "_weft_answered_by_fault"


def _serialise_in_process_moto() -> None:
    """Serialise moto as users do (``serialise_moto``), and let fault hooks answer instead."""
    from moto.core.botocore_stubber import BotocoreStubber

    testing_moto.serialise_moto()
    original = BotocoreStubber.process_request
    if getattr(original, "weft_fault_aware", False):
        return

    def fault_aware(self: Any, request: Any) -> Any:
        if getattr(request, ANSWERED_BY_FAULT, False):
            return None  # a fault hook answered this send: moto must not apply it as well
        return original(self, request)

    fault_aware.weft_fault_aware = True  # type: ignore[attr-defined]
    BotocoreStubber.process_request = fault_aware  # type: ignore[method-assign]


@dataclass
class MotoEnvironment:
    """The process-wide moto: the in-process mock, and the HTTP server once asked for."""

    mock: Any
    session: Any = None
    endpoint: str | None = None
    _server: Any = None
    _clients: dict[tuple[str, str | None], Any] = field(default_factory=dict)

    def client(self, service: str = "dynamodb", *, http: bool = False, fresh: bool = False) -> Any:
        """A client configured like the adapter's own (short timeouts, no SDK retries).

        Shared per (service, mode) unless ``fresh``: fault tests hook their own client so the
        hooks cannot leak into other tests.
        """
        from botocore.config import Config

        endpoint = self.endpoint if http else None
        if http and endpoint is None:
            raise RuntimeError("the moto server is not started")
        if fresh or (service, endpoint) not in self._clients:
            config = Config(
                connect_timeout=2,
                read_timeout=10,
                retries={"total_max_attempts": 1, "mode": "standard"},
                max_pool_connections=32,
            )
            made = self.session.client(
                service,
                region_name=REGION,
                endpoint_url=endpoint,
                config=config,
            )
            if fresh:
                return made
            self._clients[(service, endpoint)] = made
        return self._clients[(service, endpoint)]

    def start_server(self) -> str:
        """Start moto's server on a free loopback port (once) and return its endpoint.

        It is the same locked server ``weft dev`` runs, sharing ``MOTO_LOCK`` with in-process
        moto so the two modes are serialised together.
        """
        if self.endpoint is None:
            from weft_serverless.dev_moto import LockedMotoServer

            self._server = LockedMotoServer(lock=MOTO_LOCK)
            self.endpoint = self._server.start()
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        for made in self._clients.values():
            made.close()
        self.mock.stop()


_ENVIRONMENT: MotoEnvironment | None = None
_START_LOCK = threading.Lock()


def moto_environment(config: pytest.Config) -> MotoEnvironment:
    """Start the process-wide moto once; it stops when the pytest session ends."""
    global _ENVIRONMENT
    with _START_LOCK:
        if _ENVIRONMENT is None:
            import boto3
            from moto import mock_aws

            _serialise_in_process_moto()
            mock = mock_aws()
            mock.start()
            _ENVIRONMENT = MotoEnvironment(mock, boto3.session.Session())
            config.add_cleanup(_stop_environment)
        return _ENVIRONMENT


def _stop_environment() -> None:
    global _ENVIRONMENT
    if _ENVIRONMENT is not None:
        _ENVIRONMENT.stop()
        _ENVIRONMENT = None


def new_table(client: Any) -> str:
    """Create a fresh table (``table_spec``) and return its name."""
    name = f"weft-{uuid.uuid4().hex[:12]}"
    create_table(client, name)
    return name


def new_bucket(client: Any) -> str:
    name = f"weft-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


def _backend(request: pytest.FixtureRequest, *, http: bool, **options: Any) -> Opener:
    env = moto_environment(request.config)
    if http:
        env.start_server()
    client = env.client(http=http)
    table = new_table(client)
    request.addfinalizer(lambda: client.delete_table(TableName=table))
    return lambda: DynamoDBStorage(table, client=client, **options)


def dynamodb_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """In-process moto: a fresh table per test; every open is a new handle on it."""
    return _backend(request, http=False, sleep=_tiny_sleep)


def dynamodb_http_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """moto's server over loopback HTTP: a fresh table per test, new handle per open."""
    return _backend(request, http=True, sleep=_tiny_sleep)


def _tiny_sleep(seconds: float) -> None:
    """Backoff in tests: moto never throttles, so real waits would only slow the suite."""


DYNAMODB_BACKENDS = {"dynamodb": dynamodb_backend, "dynamodb-http": dynamodb_http_backend}


# -- fixtures for tests/dynamodb ---------------------------------------------------------------


@pytest.fixture(scope="session")
def moto(pytestconfig: pytest.Config) -> MotoEnvironment:
    """The process-wide moto: ``mock_aws`` started once for the session."""
    return moto_environment(pytestconfig)


@pytest.fixture(scope="session")
def moto_server(moto: MotoEnvironment) -> str:
    """The endpoint of moto's HTTP server on loopback."""
    return moto.start_server()


@pytest.fixture
def dynamodb_table(moto: MotoEnvironment) -> Iterator[str]:
    """A fresh in-process table, deleted after the test."""
    client = moto.client()
    table = new_table(client)
    yield table
    client.delete_table(TableName=table)


@pytest.fixture
def s3_bucket(moto: MotoEnvironment) -> str:
    """A fresh in-process S3 bucket for offload tests."""
    return new_bucket(moto.client("s3"))


# -- fault injection ------------------------------------------------------------------------------
#
# A hook registered first on ``before-send.dynamodb.<Operation>`` runs before moto (and before
# any socket is opened): returning an ``AWSResponse`` answers the send (and marks the request so
# moto skips it), raising looks like a transport failure, returning ``None`` lets the request
# through. ``apply`` performs the request for real first, which is how a response "lost after
# the write landed" is staged.

Step = Callable[[Any], Any]
_JSON = "application/x-amz-json-1.0"


class _RawBody:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def aws_response(request: Any, status: int, payload: dict[str, Any]) -> Any:
    """A synthetic DynamoDB answer, parsed by botocore exactly like a real one."""
    import json

    from botocore.awsrequest import AWSResponse, HTTPHeaders

    headers = HTTPHeaders.from_dict({"Content-Type": _JSON, "x-amzn-RequestId": uuid.uuid4().hex})
    return AWSResponse(request.url, status, headers, _RawBody(json.dumps(payload).encode()))


def aws_error(code: str, message: str = "injected", status: int = 400, **extra: Any) -> Step:
    """A step answering with DynamoDB error ``code``."""
    payload = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "Message": message, **extra}
    return lambda request: aws_response(request, status, payload)


def cancelled(*reasons: str) -> Step:
    """A ``TransactionCanceledException`` with one reason per transaction item."""
    text = "Transaction cancelled, please refer cancellation reasons for specific reasons"
    text += f" [{', '.join(reasons)}]"
    codes = [{"Code": code} for code in reasons]
    return aws_error("TransactionCanceledException", text, CancellationReasons=codes)


def apply(request: Any) -> tuple[int, bytes]:
    """Perform ``request`` against moto for real (in-process or over HTTP)."""
    if request.url.startswith("http://127.0.0.1"):
        from botocore.httpsession import URLLib3Session

        response = URLLib3Session().send(request)
        return response.status_code, response.content
    from moto.core.models import botocore_stubber

    answer = botocore_stubber.process_request(request)
    assert answer is not None, f"moto does not serve {request.url}"
    status, _, body = answer
    return status, body if isinstance(body, bytes) else str(body).encode()


def applied_then(step: Step) -> Step:
    """Apply the request for real, then answer with ``step`` (the real answer is lost)."""

    def run(request: Any) -> Any:
        apply(request)
        return step(request)

    return run


def raises(error: Callable[..., Exception], **kwargs: Any) -> Step:
    """A step failing in transport, e.g. ``ReadTimeoutError``, before any answer."""

    def run(request: Any) -> Any:
        raise error(endpoint_url=request.url, **kwargs)

    return run


def read_timeout() -> Step:
    from botocore.exceptions import ReadTimeoutError

    return raises(ReadTimeoutError)


def succeeded(payload: dict[str, Any] | None = None) -> Step:
    """Answer 200 without touching moto, as DynamoDB does for a replayed token."""
    return lambda request: aws_response(request, 200, payload or {})


def passes(request: Any) -> None:
    """Let the request through to moto."""
    return None


@dataclass
class FaultScript:
    """Plays ``steps`` on successive sends of one operation, then lets requests through.

    ``bodies`` records every intercepted request body (parsed JSON), so a test can check the
    ``ClientRequestToken`` of each attempt.
    """

    client: Any
    operation: str
    steps: list[Step]
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        _serialise_in_process_moto()  # the wrapper that honours ANSWERED_BY_FAULT
        self._event = f"before-send.dynamodb.{self.operation}"
        self._id = f"weft-fault-{uuid.uuid4().hex}"
        self.client.meta.events.register_first(self._event, self, unique_id=self._id)

    def __call__(self, request: Any, **_: Any) -> Any:
        import json

        self.bodies.append(json.loads(request.body or b"{}"))
        index = len(self.bodies) - 1
        answer = self.steps[index](request) if index < len(self.steps) else None
        if answer is not None:
            setattr(request, ANSWERED_BY_FAULT, True)
        return answer

    @property
    def tokens(self) -> list[str | None]:
        return [body.get("ClientRequestToken") for body in self.bodies]

    def remove(self) -> None:
        self.client.meta.events.unregister(self._event, unique_id=self._id)


class FakeClock:
    """A clock that only moves when the recorded sleep is called."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
