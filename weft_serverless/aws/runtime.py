"""The engine a Lambda container runs: built from the environment once, then reused.

A container serves many invocations, so the engine (and the boto3 client inside its
storage) is built on the first one and cached for the container's life; building per
invocation would pay ~0.2 s of client setup on every request. Build options are only a test
and local-run seam: ``get_engine(storage=..., clock=...)`` pre-builds the cached engine that
the handlers then pick up.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from weft_serverless import (
    WORKFLOW_STATUSES,
    ConfigurationError,
    Engine,
    EventBridgeSink,
    SqsTimerHints,
    WorkflowDefinition,
)
from weft_serverless.storage import Storage
from weft_serverless.storage.shard_layout import check_shards, counts_for_new_store, parse_shards

WORKFLOWS_MODULE_ENV = "WEFT_WORKFLOWS_MODULE"
OWNERSHIP_ENV = "WEFT_OWNERSHIP"
EVENT_BUS_ENV = "WEFT_EVENT_BUS"
"""The EventBridge bus (name or ARN) run events go to; unset: no events outbox at all."""
SHARDS_ENV = "WEFT_SHARDS"
"""Shard counts the table is created with (``8``, or ``timers=16,claims=16``; ADR 0050);
unset: the store's own (the defaults on a new one)."""
NEW_STORE_SHARDS_ENV = "WEFT_NEW_STORE_SHARDS"
"""Shard counts for a table this deployment creates, written as ``WEFT_SHARDS``; a table
created before keeps its own (``counts_for_new_store``). The construct's defaults come this
way, so raising them never locks a deployed table out (ADR 0055). ``WEFT_SHARDS`` wins."""
TIMER_HINTS_ENV = "WEFT_TIMER_HINTS_QUEUE_URL"
"""The SQS queue timer hints go to (ADR 0054); unset: no hints, the sweep fires every timer."""
DEFAULT_OWNERSHIP = "workflow-lease"

_engine: Engine | None = None
_lock = threading.Lock()


def load_workflows(module_name: str) -> dict[str, WorkflowDefinition]:
    """Import ``module_name`` and return its ``workflows`` mapping (name -> definition)."""
    if not module_name:
        raise ConfigurationError(
            f"set {WORKFLOWS_MODULE_ENV} to the dotted module that exports `workflows`"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"{WORKFLOWS_MODULE_ENV}={module_name!r} cannot be imported: {exc}; "
            "ship the module in the function's code and check the spelling"
        ) from exc
    workflows = getattr(module, "workflows", None)
    if not isinstance(workflows, Mapping):
        raise ConfigurationError(
            f"module {module_name!r} must export `workflows`, a dict of name -> "
            f"workflow definition (found {type(workflows).__name__})"
        )
    return dict(workflows)


def load_services(module_name: str) -> Callable[[], Mapping[str, Any]] | None:
    """The workflows module's optional ``services`` factory (``Engine.create(services=...)``);
    the engine checks it and calls it only when an activity first asks."""
    factory: Callable[[], Mapping[str, Any]] | None = getattr(
        importlib.import_module(module_name), "services", None
    )
    return factory


def build_engine(
    environ: Mapping[str, str] | None = None,
    *,
    storage: Storage | None = None,
    workflows: Mapping[str, WorkflowDefinition] | None = None,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> Engine:
    """Build the serverless engine: manual background tasks, no recovery at start.

    Anything not passed comes from the environment: storage from ``WEFT_TABLE_NAME`` (and
    ``WEFT_DYNAMODB_ENDPOINT``, ``WEFT_OFFLOAD_BUCKET``), workflows from
    ``WEFT_WORKFLOWS_MODULE`` (with its optional ``services`` factory, built lazily once per
    container, and its optional ``tracer``), ownership from ``WEFT_OWNERSHIP`` (default
    workflow-lease), the events sink from ``WEFT_EVENT_BUS`` (every function writes the
    outbox; only the maintenance function publishes, so only it needs ``events:PutEvents``),
    the shard counts from ``WEFT_SHARDS`` (refused when the table was created with others),
    the timer hint queue from ``WEFT_TIMER_HINTS_QUEUE_URL``.
    Recovery is left to the maintenance schedule, so a cold start never drives other runs.
    """
    env = os.environ if environ is None else environ
    if workflows is None:
        module_name = env.get(WORKFLOWS_MODULE_ENV, "")
        workflows = load_workflows(module_name)
        options.setdefault("services", load_services(module_name))
        # its optional ``tracer``: powertools' Tracer() or an OpenTelemetry tracer
        options.setdefault("tracer", getattr(importlib.import_module(module_name), "tracer", None))
    if storage is None:
        from weft_serverless.storage.dynamodb import DynamoDBStorage

        storage = DynamoDBStorage.from_env(env)
    options.setdefault("ownership", env.get(OWNERSHIP_ENV) or DEFAULT_OWNERSHIP)
    if env.get(SHARDS_ENV) and "shards" not in options:
        options["shards"] = parse_shards(env[SHARDS_ENV])
    elif env.get(NEW_STORE_SHARDS_ENV) and "shards" not in options:
        preferred = check_shards(parse_shards(env[NEW_STORE_SHARDS_ENV]))
        if preferred is not None:
            counts = counts_for_new_store(storage, preferred, WORKFLOW_STATUSES)
            options["shards"] = counts.as_dict()
    if env.get(TIMER_HINTS_ENV) and "timer_hints" not in options:
        options["timer_hints"] = SqsTimerHints(env[TIMER_HINTS_ENV])
    if env.get(EVENT_BUS_ENV) and "events" not in options:
        options["events"] = EventBridgeSink(env[EVENT_BUS_ENV])
    return Engine.create(
        storage,
        workflows,
        background_tasks="manual",
        recover=False,
        clock=clock,
        **options,
    )


def get_engine(
    *,
    storage: Storage | None = None,
    workflows: Mapping[str, WorkflowDefinition] | None = None,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> Engine:
    """The container's engine, built on first call and reused by every later invocation.

    Passing build arguments builds the cached engine with them (tests, ``weft dev``); it is
    an error once an engine exists, because the handlers would silently keep the old one.
    """
    global _engine
    seams = storage is not None or workflows is not None or clock is not None or options
    with _lock:
        if _engine is not None:
            if seams:
                raise ConfigurationError(
                    "the container's engine is already built; call reset_engine() first"
                )
            return _engine
        _engine = build_engine(storage=storage, workflows=workflows, clock=clock, **options)
        return _engine


def seconds_from_env(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A non-negative number of seconds from the environment variable ``name``."""
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {text!r}")
    return seconds


def reset_engine(*, close: bool = False) -> None:
    """Forget the container's engine, as a new container would (tests, redeploys in dev).

    ``close=False`` models a container that simply disappears: its claims stay in the table
    until they expire, exactly as after a crash or a freeze that never thaws.
    """
    global _engine
    with _lock:
        engine, _engine = _engine, None
    if close and engine is not None:
        engine.close()
