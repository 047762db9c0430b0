"""The engine's services: the clients activities use, built once per engine on first ask.

``Engine.create(services=factory)`` takes a zero-argument callable returning a mapping of
names to clients (``lambda: {"s3": boto3.client("s3")}``). One engine serves a process, or
one Lambda container for all its invocations, so the clients are built once there rather
than on every attempt (a boto3 client costs ~0.2 s to build). The factory runs lazily, the
first time an attempt reads ``current_activity().services``, and never at ``Engine.create``:
a cold start that only answers an API call, replays recorded steps or runs activities that
need no clients pays nothing, and a factory that fails (a network blip, a missing
permission) fails one attempt, which is retried, instead of every request the container
would serve. A failed build is not kept: the next attempt that asks calls the factory again.
A lock makes concurrent first asks run the factory once. The engine does not close the
clients (``Engine.close`` leaves them, as the process or container ends anyway).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from weft_serverless.engine.process.telemetry import Metrics, logger
from weft_serverless.errors import ServicesUnavailableError, UnknownServiceError

ServiceFactory = Callable[[], Mapping[str, Any]]

__all__ = ["ServiceFactory", "ServiceMap", "Services"]


class ServiceMap(Mapping[str, Any]):
    """A read-only view of the built services for one attempt; a name the factory did not
    provide raises ``UnknownServiceError`` (a ``KeyError``) naming what it does provide."""

    __slots__ = ("_activity", "_services")

    def __init__(self, activity: str, services: Mapping[str, Any]) -> None:
        self._activity = activity
        self._services = services

    def __getitem__(self, name: str) -> Any:
        try:
            return self._services[name]
        except KeyError:
            raise UnknownServiceError(self._activity, [name], self._services) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._services)

    def __len__(self) -> int:
        return len(self._services)

    def __repr__(self) -> str:
        return f"ServiceMap({sorted(self._services)!r})"


class Services:
    """Holds the factory and, once it succeeded, what it built (for the engine's life)."""

    def __init__(self, factory: ServiceFactory | None = None, metrics: Metrics | None = None):
        self._factory = factory
        self._metrics = metrics or Metrics()
        self._built: Mapping[str, Any] | None = None
        # Reentrant so that a factory asking for services itself gets an error, not a hang.
        self._lock = threading.RLock()
        self._building = False

    @property
    def built(self) -> bool:
        """Whether the factory has run successfully on this engine."""
        return self._built is not None

    def provider(self, activity: str, declared: tuple[str, ...]) -> Callable[[], ServiceMap]:
        """What ``ActivityContext.services`` calls for one attempt of ``activity``."""
        return functools.partial(self.view, activity, declared)

    def view(self, activity: str, declared: tuple[str, ...] = ()) -> ServiceMap:
        """The services, built now if this is the first ask; the activity's declared names
        must all be there (``UnknownServiceError`` otherwise, which is never retried)."""
        services = self._get(activity)
        missing = [name for name in declared if name not in services]
        if missing:
            raise UnknownServiceError(activity, missing, services)
        return ServiceMap(activity, services)

    def _get(self, activity: str) -> Mapping[str, Any]:
        built = self._built
        if built is not None:
            return built
        if self._factory is None:
            return {}  # no factory: no services, so any name is unknown
        with self._lock:
            if self._built is None:
                if self._building:
                    raise ServicesUnavailableError(
                        activity, "itself asked for services (a factory cannot use them)"
                    )
                self._building = True
                try:
                    self._built = self._build(self._factory, activity)
                finally:
                    self._building = False
            return self._built

    def _build(self, factory: ServiceFactory, activity: str) -> Mapping[str, Any]:
        try:
            result = factory()
        except ServicesUnavailableError:
            self._metrics.incr("services.failed")
            raise
        except Exception as exc:
            self._metrics.incr("services.failed")
            raise ServicesUnavailableError(activity, f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, Mapping):
            self._metrics.incr("services.failed")
            raise ServicesUnavailableError(
                activity,
                f"returned {type(result).__name__}, not a mapping of service names to clients",
            )
        bad = [name for name in result if not isinstance(name, str) or not name]
        if bad:
            self._metrics.incr("services.failed")
            raise ServicesUnavailableError(
                activity, f"returned keys that are not non-empty names (str): {bad!r}"
            )
        self._metrics.incr("services.built")
        logger.info("services built for this engine: %s", ", ".join(sorted(result)))
        return dict(result)
