"""``weft dev``: the serverless topology on one machine, in one process, in memory.

Three parts, each on its own threads: moto's DynamoDB server on a free loopback port (behind
a lock, because moto's models are not safe under concurrent requests), werkzeug's threaded
WSGI server turning every request into an API Gateway REST proxy event for the API handler,
and a ticker that calls the maintenance handler with an EventBridge Scheduled Event (the
events come from ``weft_serverless.lambda_events``). Nothing is written to disk.

As deployed, the two handlers run in two containers, each with its own engine and one
invocation at a time: the API container runs the handler ``handlers/api.py`` holds
(``weft_serverless.aws.make_api_handler()``, built only after the environment it reads is
set), the maintenance container the factory ``handlers/maintenance.py`` calls, on an engine
of its own. Both come from the installed package, so ``weft dev`` also runs from a wheel,
which has no ``handlers/`` directory. So a
request that waits for its result (``wait_seconds``) never holds up the ticker, and the
timer it waits for fires meanwhile, as it would in AWS. API requests still run one at a
time: powertools' resolver keeps the current event in a process-wide attribute, so this
process is one API container, like a function with a concurrency of one.
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
from dataclasses import dataclass
from http import HTTPStatus
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from weft_serverless import Engine
    from weft_serverless.hint_ports import LocalTimerHints

from weft_serverless import dev_events, dev_requests, hints
from weft_serverless.aws.route_types import MAX_BODY_BYTES
from weft_serverless.cli_commands.target import make_workflows_importable
from weft_serverless.dev_moto import LockedMotoServer
from weft_serverless.lambda_events import (
    DEFAULT_REGION,
    lambda_context,
    response_parts,
    rest_event,
    scheduled_event,
    sqs_event,
)
from weft_serverless.loopback import LOOPBACK_NAMES

Handler = Callable[[dict[str, Any], Any], Any]

DEFAULT_TABLE = "weft-dev"
DEFAULT_WORKFLOWS = "examples.workflows"
DEFAULT_OWNERSHIP = "workflow-lease"
# API Gateway stops waiting for a Lambda integration after 29 s; mirror it.
API_BUDGET_SECONDS = 29.0
MAINTENANCE_BUDGET_SECONDS = 60.0
STOP_WAIT_SECONDS = 1.0
"""How long a stop waits for a request or a maintenance pass in flight to end."""
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


@dataclass(frozen=True, slots=True)
class DevConfig:
    """What ``weft dev`` serves, and where."""

    host: str = "127.0.0.1"
    port: int = 8080
    workflows: str = DEFAULT_WORKFLOWS
    tick: float = 1.0
    table: str = DEFAULT_TABLE
    verbose: bool = False
    shards: str = ""
    """``WEFT_SHARDS`` for the table (``timers=16``; empty: the defaults), ADR 0050."""


# -- the HTTP front door ---------------------------------------------------------------------


class _Container:
    """One Lambda container: a handler, called for one event at a time."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self._lock = threading.Lock()

    def invoke(self, event: dict[str, Any], context: Any) -> Any:
        with self._lock:
            return self.handler(event, context)


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
        self._api: _Container | None = None
        self._maintenance: _Container | None = None
        self._maintenance_engine: Engine | None = None
        self._timer_engine: Engine | None = None
        self.timer_hints: LocalTimerHints | None = None
        self._http: Any = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._print_lock = threading.Lock()

    def start(self) -> str:
        from weft_serverless.errors import ConfigurationError

        self.endpoint = self.moto.start()
        self._configure_environment()
        self._create_table()
        bus = dev_events.setup(self.endpoint, self.region)
        workflows = self._import(self.config.workflows)
        registry = getattr(workflows, "workflows", None)
        self.workflow_types = sorted(registry) if isinstance(registry, Mapping) else []
        self.samples = dict(getattr(workflows, "SAMPLES", {}) or {})
        from weft_serverless.aws import (
            build_engine,
            get_engine,
            make_api_handler,
            make_maintenance_handler,
            make_timer_hint_handler,
        )
        from weft_serverless.hint_ports import LocalTimerHints, hint_body

        self._api = _Container(make_api_handler())
        # The timer hint queue and worker, in this process (ADR 0054): every engine sends
        # hints to the wheel, whose thread fires each at due on a worker engine of its own.
        self.timer_hints = hints = LocalTimerHints()
        # build the container's engine now: a bad module fails here, not per request
        get_engine(timer_hints=hints)
        self._maintenance_engine = engine = build_engine(
            events=dev_events.PrintedSink(bus, self.log), timer_hints=hints
        )
        self._maintenance = _Container(make_maintenance_handler(engine_factory=lambda: engine))
        self._timer_engine = timer_engine = build_engine(timer_hints=hints)
        timers = _Container(make_timer_hint_handler(engine_factory=lambda: timer_engine))

        def fire(due: Any) -> None:
            """Hand due hints to the timer worker, and say in the log what they fired, as a
            maintenance invocation does."""
            before = timer_engine.runtime.metrics.timers_fired
            timers.invoke(
                sqs_event(hint_body(hint) for hint in due),
                self._context("weft-dev-timers", MAINTENANCE_BUDGET_SECONDS),
            )
            fired = timer_engine.runtime.metrics.timers_fired - before
            if fired:
                self.log(f"timers: {fired} timer(s) fired at due (hint)")

        hints.attach(fire)
        from werkzeug.serving import make_server

        try:
            self._http = make_server(self.config.host, self.config.port, self._wsgi, threaded=True)
        except (OSError, SystemExit) as exc:  # werkzeug exits when it cannot bind
            reason = exc.strerror if isinstance(exc, OSError) else "the address is unavailable"
            raise ConfigurationError(
                f"cannot listen on {self.config.host}:{self.config.port}: {reason or exc}; "
                "pick another --port (0 takes any free one)"
            ) from None
        self._http.daemon_threads = True
        host, port = self._http.server_address[:2]
        self.url = f"http://{_url_host(str(host))}:{port}"
        self._spawn("http", self._http.serve_forever)
        self._spawn("maintenance", self._tick_forever)
        return self.url

    def stop(self) -> None:
        """Stop within about ``STOP_WAIT_SECONDS``, whatever is in flight.

        Invocations in flight see no time left from now on, so they start no new step (a
        maintenance pass ends at its next step); one stuck in an activity is not waited for
        beyond the bound: everything lives in this process, so nothing a wait would keep.
        """
        self._stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.timer_hints is not None:
            self.timer_hints.stop()
        idle = not any(thread.is_alive() for thread in self._threads)
        if self._timer_engine is not None and idle:
            self._timer_engine.close()
            self._timer_engine = None
        if self._maintenance_engine is not None and idle:  # never close it under a pass
            self._maintenance_engine.close()
            self._maintenance_engine = None
        self.moto.stop()

    # -- setup ------------------------------------------------------------------------------

    def _configure_environment(self) -> None:
        """Set what the handlers read at import: fake credentials, region, table, module."""
        from weft_serverless.aws.runtime import OWNERSHIP_ENV, SHARDS_ENV, WORKFLOWS_MODULE_ENV
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
        if self.config.shards:
            os.environ[SHARDS_ENV] = self.config.shards
        os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "weft-dev")
        # The handlers' JSON lines (one per request and per tick) and EMF metrics drown the
        # compact log locally; --verbose (or the variables themselves) bring them back.
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "INFO" if self.config.verbose else "WARNING")
        os.environ.setdefault(
            "POWERTOOLS_METRICS_DISABLED", "false" if self.config.verbose else "true"
        )
        make_workflows_importable()

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

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"weft-dev-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- running ----------------------------------------------------------------------------

    def _wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        """One HTTP request: an API Gateway event in, the handler's answer out as HTTP."""
        began = time.monotonic()
        method, target = str(environ["REQUEST_METHOD"]), dev_requests.target(environ)
        try:
            dev_requests.check_sender(environ, self.config.host in LOOPBACK_NAMES)
            body = dev_requests.read_body(environ, MAX_BODY_BYTES)
            dev_requests.check_body_type(environ, body)
        except dev_requests.Refused as refused:
            status, headers = refused.status, [("Content-Type", "application/json")]
            payload = json.dumps(refused.body()).encode()
        else:
            address = str(environ.get("REMOTE_ADDR") or "127.0.0.1")
            event = rest_event(method, target, dev_requests.headers(environ), body, address)
            status, headers, payload = self.call_api(event)
        headers.append(("Content-Length", str(len(payload))))
        start_response(f"{status} {_phrase(status)}", headers)
        elapsed = (time.monotonic() - began) * 1000
        self.log(f"{method} {target} -> {status} ({elapsed:.0f} ms)")
        return [] if method == "HEAD" else [payload]

    def call_api(self, event: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        """One API invocation; an exception becomes API Gateway's 502, as it would deployed."""
        assert self._api is not None
        context = self._context("weft-dev-api", API_BUDGET_SECONDS)
        try:
            response = self._api.invoke(event, context)
        except Exception:
            self.log("API handler raised:\n" + traceback.format_exc().rstrip())
            response = None
        return response_parts(response)

    def maintain_once(self) -> Any:
        """One maintenance invocation, with a fresh Scheduled Event."""
        assert self._maintenance is not None
        context = self._context("weft-dev-maintenance", MAINTENANCE_BUDGET_SECONDS)
        return self._maintenance.invoke(scheduled_event(self.region), context)

    def _context(self, function: str, budget: float) -> Any:
        """A Lambda context for one invocation, whose time runs out when the server stops."""
        return _UntilStopped(lambda_context(function, budget, self.region), self._stopping)

    def _tick_forever(self) -> None:
        while not self._stopping.wait(self.config.tick):
            try:
                report = self.maintain_once()
            except Exception:
                if not self._stopping.is_set():  # a pass cut by the stop is no news
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
        weft = hints.program("weft")
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
            f"    curl -s '{self.url}/workflows/ID/events'   # published ones print here",
            "  operator CLI (another shell, in this directory):",
            f"    WEFT_TABLE_NAME={self.config.table} WEFT_DYNAMODB_ENDPOINT={self.endpoint} "
            f"{weft} list",
            "  web console (another shell, in this directory):",
            *([] if _has_console() else [f"    {hints.install_extra('console')}"]),
            f"    {weft} console --table {self.config.table} --endpoint-url {self.endpoint} "
            f"--workflows {self.config.workflows}",
            "Ctrl-C to stop.",
        ]
        if self.config.host not in LOOPBACK_NAMES:
            lines.insert(1, "  WARNING: not bound to loopback; this API has no authentication")
        return "\n".join(lines)


class _UntilStopped:
    """A Lambda context with no time left once ``stopping`` is set (else the wrapped one's)."""

    def __init__(self, context: Any, stopping: threading.Event) -> None:
        self._context, self._stopping = context, stopping

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def get_remaining_time_in_millis(self) -> int:
        return 0 if self._stopping.is_set() else int(self._context.get_remaining_time_in_millis())


def _has_console() -> bool:
    """Whether the console's extra (Flask) is installed."""
    import importlib.util

    return importlib.util.find_spec("flask") is not None


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


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
