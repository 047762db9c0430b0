"""Errors of activity services (``Engine.create(services=...)``, ``activity(services=...)``).

They live beside ``errors.py`` rather than in it because that module is at its size limit;
they are ``WeftError`` subclasses like every other and reach users through the package.
"""

from __future__ import annotations

from collections.abc import Iterable

from weft_serverless.errors import ConfigurationError, WeftError


def _names(names: Iterable[str]) -> str:
    listed = ", ".join(repr(name) for name in sorted(names))
    return listed or "nothing"


class ServicesUnavailableError(WeftError):
    """The engine's services factory raised, or returned something other than a mapping of
    names to clients: the attempt that asked fails with this error and is retried per its
    ``RetryPolicy``, and the next attempt that asks calls the factory again."""

    def __init__(self, activity: str, reason: str) -> None:
        super().__init__(
            f"activity {activity!r} asked for services and the services factory {reason}; "
            "this attempt fails and is retried per the activity's retry policy (the factory "
            "runs again on the next attempt that asks)"
        )
        self.activity = activity
        self.reason = reason


class UnknownServiceError(WeftError, KeyError):
    """An activity asked for a service the engine's services do not provide.

    A ``KeyError`` too, so ``services.get(name)`` and ``name in services`` behave as on any
    mapping. Not retried: the engine builds its services once, so a retry on it would fail
    the same way; fix the factory (or the name) and retry the run.
    """

    def __init__(self, activity: str, missing: Iterable[str], provided: Iterable[str]) -> None:
        self.activity = activity
        self.missing = sorted(missing)
        self.provided = sorted(provided)
        super().__init__(
            f"activity {activity!r} needs service(s) {_names(self.missing)}, but the engine's "
            f"services factory provides {_names(self.provided)}; add them to the mapping "
            "Engine.create(services=...) returns, or fix the name"
        )

    __str__ = Exception.__str__  # a KeyError would quote the message


class MissingServiceError(ConfigurationError):
    """A registered activity declares ``services=(...)`` and the engine was created without
    a ``services`` factory: raised by ``Engine.create``, before anything runs."""

    def __init__(self, workflow: str, activity: str, service: str) -> None:
        super().__init__(
            f"workflow {workflow!r}: activity {activity!r} declares service {service!r}, but "
            "the engine has no services factory; pass Engine.create(..., services=lambda: "
            f"{{{service!r}: ...}})"
        )
        self.workflow = workflow
        self.activity = activity
        self.service = service
