"""``weft dev``: the serverless topology on one machine, in one process, in memory.

Three parts, each on its own thread: moto's DynamoDB server on a free loopback port (behind
a lock, because moto's models are not safe under concurrent requests), an HTTP server that
turns every request into an API Gateway REST proxy event for the API handler, and a ticker
that calls the maintenance handler with an EventBridge Scheduled Event (the events come from
``weft_serverless.lambda_events``). The handlers are the
modules Lambda runs (``handlers.api``, ``handlers.maintenance``), imported only after the
environment they read at import time is set. Nothing is written to disk.

Handlers run one event at a time: in Lambda each container serves one invocation at a time,
and here both handlers share the process's one engine (``weft_serverless.aws.runtime``).
"""

from __future__ import annotations

import datetime as dt
import importlib
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO

from weft_serverless.lambda_events import (
    DEFAULT_REGION,
    lambda_context,
    response_parts,
    rest_event,
    scheduled_event,
)

Handler = Callable[[dict[str, Any], Any], Any]

DEFAULT_TABLE = "weft-dev"
DEFAULT_WORKFLOWS = "examples.workflows"
DEFAULT_OWNERSHIP = "workflow-lease"
# API Gateway stops waiting for a Lambda integration after 29 s; mirror it.
API_BUDGET_SECONDS = 29.0
MAINTENANCE_BUDGET_SECONDS = 60.0
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True, slots=True)
class DevConfig:
    """What ``weft dev`` serves, and where."""

    host: str = "127.0.0.1"
    port: int = 8080
    workflows: str = DEFAULT_WORKFLOWS
    tick: float = 1.0
    table: str = DEFAULT_TABLE
    verbose: bool = False


# -- moto ------------------------------------------------------------------------------------


class LockedMotoServer:
    """moto's server on loopback, serving one request at a time (body included).

    moto applies a conditional write as read-check-write without a lock, so two concurrent
    requests can both pass a condition; serialising requests restores DynamoDB's atomicity.
    """

    def __init__(
        self, host: str = "127.0.0.1", lock: AbstractContextManager[Any] | None = None
    ) -> None:
        self.host = host
        self._server: Any = None
        # The tests pass the lock that also serialises in-process moto.
        self._lock = lock if lock is not None else threading.Lock()

    def start(self) -> str:
        import logging

        try:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError:
            from weft_serverless.errors import ConfigurationError

            raise ConfigurationError(
                "weft dev runs DynamoDB locally with moto, which is not installed; "
                "pip install 'weft-serverless[local]'"
            ) from None

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # it logs every request
        app = DomainDispatcherApplication(create_backend_app)

        def locked(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            with self._lock:
                return [b"".join(app(environ, start_response))]

        self._server = make_server(
            self.host, 0, locked, threaded=True, request_handler=MotoRequestHandler
        )
        threading.Thread(target=self._server.serve_forever, name="moto", daemon=True).start()
        return f"http://{self.host}:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# -- the HTTP front door ---------------------------------------------------------------------


class _ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], dev: DevServer) -> None:
        self.dev = dev
        super().__init__(address, _ApiRequest)


class _ApiRequest(BaseHTTPRequestHandler):
    server: _ApiServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._invoke()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _invoke(self) -> None:
        began = time.monotonic()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.send_error(400, "bad Content-Length")
            return
        body = self.rfile.read(length) if length > 0 else b""
        event = rest_event(
            self.command, self.path, self.headers.items(), body, self.client_address[0]
        )
        status, headers, payload = self.server.dev.call_api(event)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        elapsed = (time.monotonic() - began) * 1000
        self.server.dev.log(f"{self.command} {self.path} -> {status} ({elapsed:.0f} ms)")

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's per-request line; ``_invoke`` logs a compact one instead."""


# -- the whole stack -------------------------------------------------------------------------


class DevServer:
    """moto + API handler over HTTP + maintenance ticker; ``start`` returns the API's URL."""

    def __init__(self, config: DevConfig, out: TextIO | None = None) -> None:
        self.config = config
        self.out = out or sys.stdout
        self.moto = LockedMotoServer()
        self.region = DEFAULT_REGION
        self.endpoint = ""
        self.url = ""
        self.workflow_types: list[str] = []
        self.samples: dict[str, Any] = {}
        self._api: Handler | None = None
        self._maintenance: Handler | None = None
        # Both handlers share the process's one engine (weft_serverless.aws.runtime), which
        # serves one invocation at a time, as a Lambda container does.
        self._invoke_lock = threading.Lock()
        self._http: _ApiServer | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._print_lock = threading.Lock()

    def start(self) -> str:
        from weft_serverless.errors import ConfigurationError

        self.endpoint = self.moto.start()
        self._configure_environment()
        self._create_table()
        workflows = self._import(self.config.workflows)
        registry = getattr(workflows, "workflows", None)
        self.workflow_types = sorted(registry) if isinstance(registry, Mapping) else []
        self.samples = dict(getattr(workflows, "SAMPLES", {}) or {})
        self._api = self._handler("handlers.api")
        self._maintenance = self._handler("handlers.maintenance")
        from weft_serverless.aws import get_engine

        get_engine()  # build the container's engine now: a bad module fails here, not per request
        try:
            self._http = _ApiServer((self.config.host, self.config.port), self)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror or exc}; "
                "pick another --port (0 takes any free one)"
            ) from None
        host, port = self._http.server_address[:2]
        self.url = f"http://{_url_host(str(host))}:{port}"
        self._spawn("http", self._http.serve_forever)
        self._spawn("maintenance", self._tick_forever)
        return self.url

    def stop(self) -> None:
        self._stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self.moto.stop()

    # -- setup ------------------------------------------------------------------------------

    def _configure_environment(self) -> None:
        """Set what the handlers read at import: fake credentials, region, table, module."""
        from weft_serverless.aws.runtime import OWNERSHIP_ENV, WORKFLOWS_MODULE_ENV
        from weft_serverless.storage.dynamodb_schema import ENDPOINT_URL_ENV, TABLE_NAME_ENV

        self.region = (
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        )
        os.environ.pop("AWS_PROFILE", None)
        os.environ.update(FAKE_CREDENTIALS)
        os.environ.update(
            {
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                TABLE_NAME_ENV: self.config.table,
                ENDPOINT_URL_ENV: self.endpoint,
                WORKFLOWS_MODULE_ENV: self.config.workflows,
            }
        )
        os.environ.setdefault(OWNERSHIP_ENV, DEFAULT_OWNERSHIP)
        os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "weft-dev")
        # The handlers' JSON lines (one per request and per tick) and EMF metrics drown the
        # compact log locally; --verbose (or the variables themselves) bring them back.
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "INFO" if self.config.verbose else "WARNING")
        os.environ.setdefault(
            "POWERTOOLS_METRICS_DISABLED", "false" if self.config.verbose else "true"
        )
        # The cwd first (as ``python -m`` does), then the source tree that holds handlers/.
        cwd, source_tree = os.getcwd(), str(Path(__file__).resolve().parent.parent)
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
        if source_tree not in sys.path:
            sys.path.append(source_tree)

    def _create_table(self) -> None:
        from weft_serverless.storage.dynamodb import DynamoDBStorage

        storage = DynamoDBStorage(self.config.table, region=self.region, endpoint_url=self.endpoint)
        try:
            storage.create_table()
        finally:
            storage.close()

    def _import(self, name: str) -> ModuleType:
        from weft_serverless.errors import ConfigurationError

        try:
            return importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import {name!r}: {exc}") from None

    def _handler(self, module: str) -> Handler:
        from weft_serverless.errors import ConfigurationError

        handler = getattr(self._import(module), "handler", None)
        if not callable(handler):
            raise ConfigurationError(f"{module} has no handler(event, context) function")
        return handler  # type: ignore[no-any-return]

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"weft-dev-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- running ----------------------------------------------------------------------------

    def call_api(self, event: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        """One API invocation; an exception becomes API Gateway's 502, as it would deployed."""
        assert self._api is not None
        context = lambda_context("weft-dev-api", API_BUDGET_SECONDS, self.region)
        try:
            with self._invoke_lock:
                response = self._api(event, context)
        except Exception:
            self.log("API handler raised:\n" + traceback.format_exc().rstrip())
            response = None
        return response_parts(response)

    def maintain_once(self) -> Any:
        """One maintenance invocation, with a fresh Scheduled Event."""
        assert self._maintenance is not None
        context = lambda_context("weft-dev-maintenance", MAINTENANCE_BUDGET_SECONDS, self.region)
        with self._invoke_lock:
            return self._maintenance(scheduled_event(self.region), context)

    def _tick_forever(self) -> None:
        while not self._stopping.wait(self.config.tick):
            try:
                report = self.maintain_once()
            except Exception:
                self.log("maintenance handler raised:\n" + traceback.format_exc().rstrip())
                continue
            summary = _report_summary(report)
            if summary:
                self.log(f"maintenance: {summary}")

    def log(self, line: str) -> None:
        stamp = dt.datetime.now().strftime("%H:%M:%S")
        with self._print_lock:
            print(f"{stamp} {line}", file=self.out, flush=True)

    def banner(self) -> str:
        """What to print once everything is up: where, what, and a first command to try."""
        kind = next(iter(self.samples), self.workflow_types[0] if self.workflow_types else "x")
        body = json.dumps({"workflow_type": kind, "input": self.samples.get(kind, {})})
        lines = [
            f"weft dev listening on {self.url}",
            f"  workflows   {self.config.workflows}: {', '.join(self.workflow_types) or '-'}",
            f"  DynamoDB    moto at {self.endpoint}, table {self.config.table}, "
            f"region {self.region}",
            f"  maintenance every {self.config.tick:g} s (EventBridge Scheduled Event)",
            "  try:",
            f"    curl -s -X POST {self.url}/workflows -H 'content-type: application/json' \\",
            f"      -d '{body}'",
            f"    curl -s '{self.url}/workflows?limit=10'",
            "  operator CLI (another shell):",
            f"    WEFT_TABLE_NAME={self.config.table} WEFT_DYNAMODB_ENDPOINT={self.endpoint} "
            "weft list",
            "Ctrl-C to stop.",
        ]
        if self.config.host not in LOOPBACK:
            lines.insert(1, "  WARNING: not bound to loopback; this API has no authentication")
        return "\n".join(lines)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _report_summary(report: Any) -> str:
    """What a maintenance invocation did (its summary dict), or '' when it was idle."""
    if not isinstance(report, Mapping):
        return ""
    fired, driven = report.get("timers_fired") or 0, report.get("workflows_driven") or 0
    if not (fired or driven):
        return ""
    return f"{fired} timer(s) fired, {driven} workflow(s) driven"


def run(config: DevConfig, out: TextIO | None = None) -> int:
    """Serve until SIGINT or SIGTERM, then stop every part; returns the exit status (0)."""
    if out is None and isinstance(sys.stdout, io.TextIOWrapper):
        # Activities print; show their lines as they happen, even through a pipe or tee.
        sys.stdout.reconfigure(line_buffering=True)
    dev = DevServer(config, out)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        dev.start()
        print(dev.banner(), file=dev.out, flush=True)
        while not stop.wait(0.5):
            pass
        dev.log("stopping")
    finally:
        dev.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("weft dev stopped", file=dev.out, flush=True)
    return 0
