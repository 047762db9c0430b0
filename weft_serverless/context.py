"""``WorkflowContext``: what a workflow generator receives as ``ctx``.

Every method returns a command to yield; nothing here touches storage. Validation happens at
the call, so a bad argument fails at the line that wrote it.
"""

from __future__ import annotations

import logging
import random as _random
import uuid as _uuid
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, TypeVar

from weft_serverless.codec import encode
from weft_serverless.commands import (
    DEFAULT_RETRY,
    PARENT_CLOSE_POLICIES,
    All,
    Command,
    ContinueAsNew,
    Duration,
    GetVersion,
    Map,
    ParentClosePolicy,
    Race,
    Record,
    RetryPolicy,
    Run,
    Sleep,
    StartChild,
    UpsertSearchAttributes,
    WaitForSignal,
    WaitUntil,
    parse_duration,
)
from weft_serverless.errors import InvalidArgumentError, UnknownActivityError
from weft_serverless.finalizer import Finalizer
from weft_serverless.identifiers import (
    check_idempotency_key,
    check_name,
    check_text,
    check_workflow_id,
)
from weft_serverless.saga import Saga
from weft_serverless.search_attributes import check_tags, check_values
from weft_serverless.workflow import WorkflowDefinition

C = TypeVar("C", bound=Command[Any])

_workflow_logger = logging.getLogger("weft_serverless.workflow")


class ReplayAwareLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Logs only when the workflow is past its recorded history, so replay stays quiet."""

    def __init__(self, ctx: WorkflowContext) -> None:
        super().__init__(_workflow_logger, {"workflow_id": ctx.workflow_id})
        self._ctx = ctx

    def isEnabledFor(self, level: int) -> bool:
        return not self._ctx.is_replaying and super().isEnabledFor(level)

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(kwargs.get("extra") or {})
        extra.setdefault("workflow_id", self._ctx.workflow_id)
        kwargs["extra"] = extra
        return msg, kwargs


class WorkflowContext:
    """The durable operations available inside a workflow."""

    def __init__(
        self,
        workflow_id: str,
        definition: WorkflowDefinition,
        clock: Callable[[], float],
        encode_payload: Callable[[Any, str], bytes] | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.workflow_type = definition.name
        self._definition = definition
        self._clock = clock
        self.is_replaying = False
        self.log = ReplayAwareLogger(self)
        self.update_handlers: dict[
            str, tuple[Callable[[Any], Any], Callable[[Any], Any] | None]
        ] = {}
        self.query_handlers: dict[str, Callable[[Any], Any]] = {}
        self._unyielded: dict[int, Command[Any]] = {}
        # Finalizers registered so far (``on_cancel``), in order; the driver stores them.
        self.finalizers: list[Finalizer] = []
        self.finalizers_stored = 0
        self._encode_payload = encode_payload or (lambda value, what: encode(value, what))

    def _made(self, cmd: C) -> C:
        """Remember a command until the workflow yields it (see ``unyielded``)."""
        self._unyielded[id(cmd)] = cmd
        return cmd

    def mark_yielded(self, cmd: Command[Any]) -> None:
        """The driver received ``cmd``: it and the commands inside it were not forgotten."""
        self._unyielded.pop(id(cmd), None)
        for inner in getattr(cmd, "commands", ()):
            self.mark_yielded(inner)

    def unyielded(self) -> list[Command[Any]]:
        """Commands made through this context and never yielded: a ``yield`` was left out."""
        return list(self._unyielded.values())

    def on_update(
        self,
        name: str,
        handler: Callable[[Any], Any],
        *,
        validator: Callable[[Any], Any] | None = None,
    ) -> None:
        """Accept updates called ``name``: ``handler(payload)`` changes state, returns a result.

        ``validator(payload)`` runs first. Only ``None`` or ``True`` accepts; anything else
        (``False``, issues, a raised error, an unexpected value) rejects, and a rejected
        update stores nothing. Handlers must only change workflow state (no I/O): replay
        calls them again to rebuild that state.
        """
        check_name(name, "update name")
        if not callable(handler) or (validator is not None and not callable(validator)):
            raise InvalidArgumentError("update handler and validator must be callable")
        self.update_handlers[name] = (handler, validator)

    def on_query(self, name: str, handler: Callable[[Any], Any]) -> None:
        """Answer ``engine.query(id, name, arg)`` with ``handler(arg)``; it must not change
        state."""
        check_text(name, "query name", None)
        if not callable(handler):
            raise InvalidArgumentError("query handler must be callable")
        self.query_handlers[name] = handler

    def run(
        self,
        activity: str | Callable[..., Any],
        input: Any = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        idempotency_key: str | None = None,
        heartbeat_timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
    ) -> Run:
        """Run a declared activity as one durable step (retried per ``retry``).

        ``timeout`` bounds one attempt, ``heartbeat_timeout`` the time between an attempt's
        heartbeats (both retried per ``retry``), ``schedule_to_close`` the whole step: every
        attempt and backoff (no attempt starts past it). With ``idempotency_key`` a "started"
        record is written before the activity runs; if a crash leaves only that record,
        recovery asks the activity's ``verify`` instead of running it blindly again (and fails
        closed without one).
        """
        cmd = _run_command(
            self.activity_name(activity),
            input,
            retry,
            timeout,
            idempotency_key,
            heartbeat_timeout,
            schedule_to_close,
        )
        self._unyielded[id(cmd)] = cmd  # _made, inlined: the call every step makes
        return cmd

    def map(
        self,
        activity: str | Callable[..., Any],
        items: Iterable[Any],
        *,
        max_concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        heartbeat_timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
    ) -> Map:
        """Run ``activity`` once per item, at most ``max_concurrency`` at once; the results
        come back in the items' order. Each item is a branch recorded as it finishes."""
        name = self.activity_name(activity)
        if isinstance(items, str | bytes) or not isinstance(items, Iterable):
            raise InvalidArgumentError("map() needs a list (or another iterable) of inputs")
        branches = tuple(
            _run_command(name, item, retry, timeout, None, heartbeat_timeout, schedule_to_close)
            for item in items
        )
        return self._made(Map(branches, _concurrency(max_concurrency), name))

    def on_cancel(
        self,
        activity: str | Callable[..., Any],
        input: Any = None,
        *,
        on_failure: bool = False,
        retry: RetryPolicy | None = None,
    ) -> None:
        """Register a finalizer: ``activity(input)`` runs at least once if this run ends
        cancelled or timed out (also failed, with ``on_failure=True``), never after it
        completes. A plain call, not yielded: the engine stores it durably before the run's
        next step; finalizers run in reverse registration order, each retried per ``retry``.
        """
        name = self.activity_name(activity)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError("retry must be a RetryPolicy", "retry")
        if not isinstance(on_failure, bool):
            raise InvalidArgumentError("on_failure must be True or False", "on_failure")
        data = self._encode_payload(input, f"input of finalizer {name!r}")
        self.finalizers.append(Finalizer(name, data, on_failure, retry or DEFAULT_RETRY))

    def activity_name(self, activity: str | Callable[..., Any]) -> str:
        """The declared name of ``activity``; ``UnknownActivityError`` if it is not declared."""
        name = self._definition.activity_name(activity)
        if name is None:
            shown = activity if isinstance(activity, str) else getattr(activity, "__name__", "?")
            declared = ", ".join(sorted(self._definition.activities)) or "none"
            raise UnknownActivityError(
                f"workflow {self._definition.name!r} runs activity {shown!r}, which it does not "
                f"declare (declared: {declared}); add it with .activities({shown}=...)"
            )
        return name

    def sleep(self, duration: Duration) -> Sleep:
        """Pause durably; a crash or redeploy in between does not shorten or repeat it."""
        return self._made(Sleep(parse_duration(duration, "sleep duration")))

    def wait_for_signal(self, name: str, *, timeout: Duration | None = None) -> WaitForSignal:
        """Receive the next ``name`` signal's payload, or ``None`` once ``timeout`` passes."""
        check_name(name, "signal name")
        seconds = None if timeout is None else parse_duration(timeout, "timeout")
        return self._made(WaitForSignal(name, seconds))

    def all(self, *commands: Command[Any] | list[Command[Any]]) -> All:
        """Run commands together; the result is the list of their results, in order."""
        return self._made(All(_commands(commands, "all")))

    def race(self, *commands: Command[Any] | list[Command[Any]]) -> Race:
        """First command to finish wins: ``(index, value)``; losing signal waits consume nothing."""
        return self._made(Race(_commands(commands, "race")))

    def start_child(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        id: str | None = None,
        parent_close_policy: ParentClosePolicy = "await",
        search_attributes: dict[str, Any] | None = None,
        tags: Iterable[str] | None = None,
    ) -> StartChild:
        """Start a child workflow.

        ``"await"`` (default) waits for its result (its failure is raised here) and cancels
        it if this workflow ends first. ``"abandon"`` returns the child's id once started and
        lets it outlive this workflow; ``"request-cancel"`` returns the id too and cancels
        the child when this workflow ends. ``search_attributes`` and ``tags``: as at
        ``Engine.start`` (values the child's type refuses: the child is ``not-started``).
        """
        check_name(workflow_type, "workflow_type")
        if id is not None:
            check_workflow_id(id, "child id")
        if parent_close_policy not in PARENT_CLOSE_POLICIES:
            raise InvalidArgumentError(
                f"parent_close_policy must be one of {', '.join(PARENT_CLOSE_POLICIES)}"
            )
        found = (dict(search_attributes) if search_attributes else None, tuple(check_tags(tags)))
        return self._made(StartChild(workflow_type, input, id, parent_close_policy, *found))

    def wait_until(
        self, predicate: Callable[[], bool], *, timeout: Duration | None = None
    ) -> WaitUntil:
        """Park until ``predicate()`` is true, re-checked after each update.

        Gives ``True``, or ``False`` once ``timeout`` passes.
        """
        if not callable(predicate):
            raise InvalidArgumentError("wait_until needs a callable predicate")
        seconds = None if timeout is None else parse_duration(timeout, "timeout")
        return self._made(WaitUntil(predicate, seconds))

    def get_version(self, change_id: str, min_supported: int, max_supported: int) -> GetVersion:
        """Pin a branch of a code change for this run.

        Runs that passed this point before the change get ``min_supported``; new runs get
        ``max_supported``; each run keeps its answer. Yielding it takes no step slot.
        """
        check_name(change_id, "change_id")
        if not (isinstance(min_supported, int) and isinstance(max_supported, int)):
            raise InvalidArgumentError("versions must be integers")
        if min_supported > max_supported:
            raise InvalidArgumentError("min_supported must be <= max_supported")
        return self._made(GetVersion(change_id, min_supported, max_supported))

    def continue_as_new(self, input: Any = None) -> ContinueAsNew:
        """End this run and start the workflow again with ``input``: same workflow id, a
        fresh history (so resume cost stays bounded), buffered signals carried over.

        ``yield ctx.continue_as_new(state)``: nothing after it runs in this run. Await or
        abandon children first: a run with open children cannot continue.
        """
        return self._made(ContinueAsNew(input))

    def saga(self) -> Saga:
        """A compensation list (see ``weft_serverless.saga.Saga``)."""
        return Saga(self)

    def now(self) -> Record:
        """The current time in epoch seconds, recorded once so replay sees the same value."""
        return self._made(Record("now", self._clock))

    def uuid(self) -> Record:
        """A random UUID string, recorded once."""
        return self._made(Record("uuid", lambda: str(_uuid.uuid4())))

    def random(self) -> Record:
        """A random float in [0, 1), recorded once."""
        return self._made(Record("random", _random.random))

    def upsert_search_attributes(self, values: dict[str, Any]) -> UpsertSearchAttributes:
        """Set search attributes of this run, a durable step (yield it); values are checked
        against the declaration here, so a bad one raises before any write."""
        checked = check_values(self._definition.search_attributes, values, self.workflow_type)
        return self._made(UpsertSearchAttributes(checked))

    def memo(self, key: str, fn: Callable[[], Any]) -> Record:
        """Compute ``fn()`` once and record it under ``key``."""
        check_name(key, "memo key")
        if not callable(fn):
            raise InvalidArgumentError("memo fn must be callable")
        return self._made(Record(f"memo:{key}", fn))


def _run_command(
    name: str,
    input: Any,
    retry: RetryPolicy | None,
    timeout: Duration | None,
    idempotency_key: str | None,
    heartbeat_timeout: Duration | None,
    schedule_to_close: Duration | None,
) -> Run:
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidArgumentError("retry must be a RetryPolicy")
    if idempotency_key is not None:
        check_idempotency_key(idempotency_key)
    return Run(
        name,
        input,
        retry or DEFAULT_RETRY,
        None if timeout is None else _positive(timeout, "timeout"),
        idempotency_key,
        None if heartbeat_timeout is None else _positive(heartbeat_timeout, "heartbeat_timeout"),
        None if schedule_to_close is None else _positive(schedule_to_close, "schedule_to_close"),
    )


def _positive(value: Duration | None, what: str) -> float | None:
    seconds = None if value is None else parse_duration(value, what)
    if seconds == 0:
        raise InvalidArgumentError(f"{what} must be > 0 seconds", field=what)
    return seconds


def _concurrency(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(
            f"max_concurrency must be a whole number >= 1 (or None), got {value!r}",
            field="max_concurrency",
        )
    return value


def _commands(items: tuple[Any, ...], what: str) -> tuple[Command[Any], ...]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, list | tuple):
            flat.extend(item)
        else:
            flat.append(item)
    if not flat:
        raise InvalidArgumentError(f"ctx.{what}() needs at least one command")
    for index, item in enumerate(flat):
        if not isinstance(item, Command):
            raise InvalidArgumentError(
                f"ctx.{what}() argument {index} is {type(item).__name__}, not a command "
                "(pass e.g. ctx.run(...), not its result)"
            )
        if isinstance(item, Record | GetVersion):
            raise InvalidArgumentError(
                f"ctx.{what}() cannot take {item.signature()}; yield it alone"
            )
    return tuple(flat)
