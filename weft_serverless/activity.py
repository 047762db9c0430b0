"""What an activity can know and do about its own run: async completion, idempotency checks,
heartbeats and cancellation.

``current_activity()`` works inside an activity attempt (it is set in the context that runs
it: the attempt's thread, or its task on the engine's event loop). ``activity(fn,
verify=...)`` declares a verifier that recovery asks, instead of running an idempotent
activity again, when a crash left only its "started" record; ``activity(fn,
services=("s3",))`` declares the engine services it uses, so that an engine created without
a services factory refuses it at ``Engine.create``.
"""

from __future__ import annotations

import base64
import contextvars
import re
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from weft_serverless.codec import encode
from weft_serverless.errors import InvalidArgumentError, PayloadTooLargeError
from weft_serverless.identifiers import check_workflow_id

_SLOT = re.compile(r"[0-9]{8}(?:\.[0-9]{3,6}){0,40}")  # keys.step_slot and branch_slot

_current: contextvars.ContextVar[ActivityContext | None] = contextvars.ContextVar(
    "weft_activity", default=None
)

_cancel_lock = threading.Lock()

MAX_HEARTBEAT_BYTES = 8 * 1024
"""Encoded size of one heartbeat's details: they ride in the attempt's retry record."""

VerificationKind = Literal["not-completed", "completed", "result-unavailable", "indeterminate"]


@dataclass(frozen=True, slots=True)
class Verification:
    """A verifier's answer about an activity that may have run before a crash."""

    kind: VerificationKind
    result: Any = None

    @classmethod
    def not_completed(cls) -> Verification:
        """It did not happen: run it now."""
        return cls("not-completed")

    @classmethod
    def completed(cls, result: Any = None) -> Verification:
        """It happened, and this is its result: record it without running again."""
        return cls("completed", result)

    @classmethod
    def result_unavailable(cls) -> Verification:
        """It happened, but its result cannot be recovered: the workflow gets an error."""
        return cls("result-unavailable")

    @classmethod
    def indeterminate(cls) -> Verification:
        """Cannot tell: the run fails closed rather than risk doing it twice."""
        return cls("indeterminate")


@dataclass(frozen=True, slots=True)
class ActivitySpec:
    """An activity function with options, for ``workflow(...).activities(name=activity(fn))``."""

    fn: Callable[..., Any]
    verify: Callable[[Any, str], Verification] | None = None
    services: tuple[str, ...] = ()


def activity(
    fn: Callable[..., Any],
    *,
    verify: Callable[[Any, str], Verification] | None = None,
    services: Collection[str] = (),
) -> ActivitySpec:
    """Declare an activity with a ``verify(input, idempotency_key)`` reconciliation hook
    and the names of the engine services it uses (``current_activity().services``)."""
    if not callable(fn):
        raise InvalidArgumentError("activity() needs a callable")
    if verify is not None and not callable(verify):
        raise InvalidArgumentError("verify must be callable")
    return ActivitySpec(fn, verify, _service_names(services))


def _service_names(services: object) -> tuple[str, ...]:
    """``services=`` as a tuple of distinct non-empty names, in the order given."""
    if isinstance(services, str | bytes | Mapping) or not isinstance(services, Collection):
        raise InvalidArgumentError(
            f"services must be a tuple of service names, like ('s3',); got {services!r}",
            "services",
        )
    for name in services:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgumentError(
                f"services must hold non-empty service names (str); got {name!r}", "services"
            )
    return tuple(dict.fromkeys(services))


@dataclass(slots=True, eq=False)
class ActivityContext:
    """Facts about the running attempt, and the switch to complete it later."""

    workflow_id: str
    activity: str
    attempt: int
    slot: str
    idempotency_key: str | None = None
    async_token: str | None = field(default=None, init=False)
    on_async: Callable[[], None] | None = field(default=None, repr=False)
    heartbeat_details: Any = None
    """The latest details an earlier attempt of this step heartbeat (None: none did)."""
    # Made on first use (most attempts never need one): see ``cancel_event``.
    _cancel: threading.Event | None = field(default=None, init=False, repr=False)
    on_heartbeat: Callable[[bytes], None] | None = field(default=None, repr=False)
    latest_heartbeat: bytes | None = field(default=None, init=False, repr=False)
    # Set by the engine: builds (once per engine) or returns its services for this attempt.
    provide_services: Callable[[], Mapping[str, Any]] | None = field(default=None, repr=False)

    @property
    def services(self) -> Mapping[str, Any]:
        """The clients the engine's services factory built: ``services["s3"]``.

        The factory runs once per engine, the first time an attempt asks for this (never
        when the engine is created, never during replay). ``ServicesUnavailableError`` if it
        fails (the attempt is retried), ``UnknownServiceError`` for a name it did not provide.
        """
        if self.provide_services is None:  # a context built by hand, not by an engine
            raise InvalidArgumentError(
                "this ActivityContext has no services; an engine sets provide_services",
                "provide_services",
            )
        return self.provide_services()

    @property
    def cancel_event(self) -> threading.Event:
        """Set when the engine gives this attempt up: check it, or wait on it, and stop."""
        event = self._cancel
        if event is None:
            with _cancel_lock:  # the attempt's thread and a cancelling one may ask at once
                if self._cancel is None:
                    self._cancel = threading.Event()
                event = self._cancel
        return event

    @property
    def cancelled(self) -> bool:
        """Whether the engine gave this attempt up (the run ended, the branch lost a race,
        a timeout passed, the invocation is about to end): its result will be discarded."""
        event = self._cancel
        return event is not None and event.is_set()

    def heartbeat(self, details: Any = None) -> None:
        """Say the attempt is alive, with its progress so far (``details``).

        The latest details reach the next attempt as ``heartbeat_details`` and show in
        ``weft show``; under workflow-lease a heartbeat renews the run's claim, and it is how
        an attempt on another engine learns that the run was cancelled (see ``cancelled``).
        Raises only for details that cannot be stored (``CodecError``, ``PayloadTooLargeError``
        past ``MAX_HEARTBEAT_BYTES``); a storage problem is the engine's, never the activity's.
        """
        data = encode(details, "heartbeat details")
        if len(data) > MAX_HEARTBEAT_BYTES:
            raise PayloadTooLargeError("heartbeat details", len(data), MAX_HEARTBEAT_BYTES)
        self.latest_heartbeat = data
        if self.on_heartbeat is not None:
            self.on_heartbeat(data)

    def complete_async(self) -> str:
        """Finish this activity later, from anywhere, with the returned token.

        The activity's return value is then ignored; ``engine.complete_activity(token, result)``
        or ``engine.fail_activity(token, error)`` resumes the workflow. The engine records
        that it waits on the token before returning it, so a completion may arrive even
        before the activity function returns.
        """
        if self.async_token is None:
            if self.on_async is not None:
                self.on_async()
            self.async_token = encode_token(self.workflow_id, self.slot, self.attempt)
        return self.async_token


def current_activity() -> ActivityContext:
    """The context of the activity attempt running on this thread."""
    context = _current.get()
    if context is None:
        raise InvalidArgumentError("current_activity() works only inside an activity")
    return context


set_current: Callable[[ActivityContext | None], object] = _current.set
"""Make ``context`` the running attempt's (None: none runs). The variable's own setter, not a
function around it: every attempt sets and clears it."""


def encode_token(workflow_id: str, slot: str, attempt: int) -> str:
    raw = f"v1\x1f{workflow_id}\x1f{slot}\x1f{attempt}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str) -> tuple[str, str, int] | None:
    """``(workflow_id, slot, attempt)`` of a token, or None when it is not one of ours."""
    if not isinstance(token, str) or not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        version, workflow_id, slot, attempt = raw.split("\x1f")
        if version != "v1" or not _SLOT.fullmatch(slot) or not 0 <= int(attempt) < 10**9:
            return None
        return check_workflow_id(workflow_id), slot, int(attempt)
    except InvalidArgumentError:  # a forged id that no key could hold
        return None
    except (ValueError, UnicodeDecodeError):
        return None
