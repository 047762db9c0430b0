"""The ``workflow()`` builder and the definitions it produces.

Definitions are validated when declared, and every problem is reported at once, so a typo
fails at import time rather than deep inside a run days later.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from weft_serverless.activity import ActivitySpec, Verification
from weft_serverless.concurrency import Concurrency
from weft_serverless.errors import InvalidArgumentError, WorkflowBuilderError
from weft_serverless.search_attributes import declaration_issues


@dataclass(frozen=True, slots=True)
class ActivityDefinition:
    """A named side-effecting function a workflow may ``ctx.run``."""

    name: str
    fn: Callable[..., Any]
    takes_input: bool
    is_async: bool
    verify: Callable[[Any, str], Verification] | None = None
    # Engine services it declares it uses (``activity(fn, services=...)``).
    services: tuple[str, ...] = ()

    @classmethod
    def of(cls, name: str, spec: Callable[..., Any] | ActivitySpec) -> ActivityDefinition:
        if isinstance(spec, ActivitySpec):
            fn, verify, services = spec.fn, spec.verify, spec.services
        else:
            fn, verify, services = spec, None, ()
        return cls(name, fn, _takes_input(fn), inspect.iscoroutinefunction(fn), verify, services)


def _takes_input(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


def _call_shape_issue(fn: Callable[..., Any]) -> str:
    """Why ``fn`` cannot be called the way an attempt calls it (``fn(input)``, or ``fn()``
    when it takes no positional parameter), or "" when it can or its signature is unknown."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""
    args: tuple[Any, ...] = (None,) if _takes_input(fn) else ()
    try:
        signature.bind(*args)
    except TypeError as exc:
        return (
            f"cannot be called with {'its one input' if args else 'no arguments'} ({exc}); "
            "an activity takes one input: pass several values as one dict or tuple, and give "
            "other parameters defaults"
        )
    return ""


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A registered workflow: its generator function, version and activities."""

    name: str
    version: str
    fn: Callable[..., Any]
    activities: Mapping[str, ActivityDefinition] = field(
        default_factory=lambda: MappingProxyType({})
    )
    compatible_versions: frozenset[str] = frozenset()
    # At most this many committed step records per run (None: unbounded); see history_limit.
    max_history: int | None = None
    concurrency: Concurrency | None = None
    # Declared search attributes {name: type} (ADR 0030); values are checked against it.
    search_attributes: Mapping[str, type] = field(default_factory=lambda: MappingProxyType({}))

    def accepts_version(self, version: str) -> bool:
        """Whether a run started on ``version`` may be resumed by this definition."""
        return version == self.version or version in self.compatible_versions

    def activity_name(self, activity: str | Callable[..., Any]) -> str | None:
        """The registered name for a name or a function, or None if not declared."""
        if isinstance(activity, str):
            return activity if activity in self.activities else None
        for name, definition in self.activities.items():
            if definition.fn is activity:
                return name
        return None


class WorkflowBuilder:
    """Collects a workflow's parts; ``execute`` validates them and returns the definition."""

    def __init__(
        self,
        name: str,
        version: str,
        compatible_versions: tuple[str, ...] = (),
        max_history: int | None = None,
        *,
        concurrency: Concurrency | None = None,
        search_attributes: Mapping[str, type] | None = None,
    ) -> None:
        self._name = name
        self._concurrency = concurrency
        self._search_attributes = (
            dict(search_attributes) if isinstance(search_attributes, Mapping) else {}
        )
        self._version = version
        self._compatible = frozenset(compatible_versions)
        self._max_history = max_history
        self._activities: dict[str, Callable[..., Any] | ActivitySpec] | None = None
        self._issues: list[str] = []
        self._done = False
        if not isinstance(name, str) or not name.strip():
            self._issues.append("name must be a non-empty string")
        elif not _is_text(name):
            self._issues.append("name holds a lone surrogate, which UTF-8 cannot encode")
        if concurrency is not None and not isinstance(concurrency, Concurrency):
            self._issues.append("concurrency must be a Concurrency(max, key, on_limit)")
        if search_attributes is not None:
            self._issues += declaration_issues(search_attributes)
        if not isinstance(version, str) or not version:
            self._issues.append("version must be a non-empty string")
        elif not _is_text(version):
            self._issues.append("version holds a lone surrogate, which UTF-8 cannot encode")

    def activities(self, **fns: Callable[..., Any] | ActivitySpec) -> WorkflowBuilder:
        """Declare the activities this workflow may run, by name."""
        if self._activities is not None:
            self._issues.append(".activities() may be called only once")
            return self
        self._activities = {}
        for activity_name, spec in fns.items():
            if not _is_text(activity_name):
                self._issues.append(f"activity name {activity_name!r} holds a lone surrogate")
                continue
            fn = spec.fn if isinstance(spec, ActivitySpec) else spec
            if not callable(fn):
                self._issues.append(f"activity {activity_name!r} is not callable")
                continue
            if inspect.isgeneratorfunction(fn):
                self._issues.append(
                    f"activity {activity_name!r} is a generator; activities are plain "
                    "functions (or async def)"
                )
                continue
            shape = _call_shape_issue(fn)
            if shape:
                self._issues.append(f"activity {activity_name!r} {shape}")
                continue
            self._activities[activity_name] = spec
        return self

    def execute(self, fn: Callable[..., Any]) -> WorkflowDefinition:
        """Finish the definition with its generator function ``fn(ctx, input)``."""
        issues = list(self._issues)
        if self._done:
            issues.append(".execute() may be called only once")
        if not inspect.isgeneratorfunction(fn):
            kind = "an async function" if inspect.iscoroutinefunction(fn) else "not a generator"
            issues.append(
                f"the workflow function {getattr(fn, '__name__', fn)!r} is {kind}; "
                "write it as a generator: def wf(ctx, input): result = yield ctx.run(...)"
            )
        if issues:
            raise WorkflowBuilderError(str(self._name), issues)
        self._done = True
        activities = {
            name: ActivityDefinition.of(name, f) for name, f in (self._activities or {}).items()
        }
        return WorkflowDefinition(
            self._name,
            self._version,
            fn,
            MappingProxyType(activities),
            self._compatible,
            self._max_history,
            concurrency=self._concurrency,
            search_attributes=MappingProxyType(self._search_attributes),
        )


def _is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (names end up in stored records and keys)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def workflow(
    name: str,
    version: str = "1",
    *,
    compatible_versions: tuple[str, ...] = (),
    max_history: int | None = None,
    concurrency: Concurrency | None = None,
    search_attributes: Mapping[str, type] | None = None,
) -> WorkflowBuilder:
    """Start defining a workflow: ``workflow("checkout").activities(...).execute(fn)``.

    A run keeps the ``version`` it started on; recovering it under another version fails
    that run, unless its version is listed in ``compatible_versions``. ``max_history``
    bounds the step records one run may commit: the step that would exceed it fails the
    run with ``HistoryLimitExceededError`` instead (a loop cannot grow a history forever).
    ``concurrency`` limits how many of its runs may be active per key at once
    (``Concurrency``). ``search_attributes`` declares ``{name: type}`` (str, int, float,
    bool, datetime) a run can be listed and counted by (``Engine.list(where=...)``).
    """
    if max_history is not None and (
        isinstance(max_history, bool) or not isinstance(max_history, int) or max_history < 1
    ):
        raise InvalidArgumentError(
            f"max_history must be a whole number of at least 1 (or None for no bound), "
            f"got {max_history!r}",
            "max_history",
        )
    return WorkflowBuilder(
        name,
        version,
        compatible_versions,
        max_history,
        concurrency=concurrency,
        search_attributes=search_attributes,
    )
