"""Sagas: durable compensation of completed steps, in reverse order, when a workflow fails.

Compensations are ordinary durable steps, so a crash in the middle of compensating resumes
compensating: replay answers the compensations already done and runs the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from weft_serverless.commands import Command, RetryPolicy
from weft_serverless.errors import ActivityFailedError

_RESULT = object()


class SagaContext(Protocol):
    """What a saga uses of its workflow's context; ``WorkflowContext`` provides it.

    A protocol rather than the class, so this module does not import ``context`` (which
    imports this one for ``ctx.saga()``): the two would otherwise form an import loop.
    """

    @property
    def log(self) -> logging.LoggerAdapter[Any]: ...

    def activity_name(self, activity: str | Callable[..., Any]) -> str: ...

    def run(
        self,
        activity: str | Callable[..., Any],
        input: Any = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> Command[Any]: ...


@dataclass(frozen=True, slots=True)
class Compensation:
    activity: str | Callable[..., Any]
    input: Any


class Saga:
    """Collects compensations as steps complete; ``compensate()`` runs them newest first."""

    def __init__(self, ctx: SagaContext) -> None:
        self._ctx = ctx
        self._compensations: list[Compensation] = []
        self.failures: list[ActivityFailedError] = []

    @property
    def pending(self) -> int:
        return len(self._compensations)

    def add_compensation(self, activity: str | Callable[..., Any], input: Any = None) -> None:
        """Register an undo step for something already done."""
        self._ctx.activity_name(activity)  # validates the name now, at the call site
        self._compensations.append(Compensation(activity, input))

    def run(
        self,
        activity: str | Callable[..., Any],
        input: Any = None,
        *,
        compensate: str | Callable[..., Any],
        compensate_input: Any = _RESULT,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> Generator[Command[Any], Any, Any]:
        """Run an activity; once it succeeded, register ``compensate``.

        The compensation receives ``compensate_input``, or by default the step's result.
        Use it as ``result = yield from saga.run(...)``.
        """
        self._ctx.activity_name(compensate)  # unknown compensation fails before the step runs
        result = yield self._ctx.run(activity, input, retry=retry, timeout=timeout)
        undo_input = result if compensate_input is _RESULT else compensate_input
        self._compensations.append(Compensation(compensate, undo_input))
        return result

    def compensate(self) -> Generator[Command[Any], Any, None]:
        """Run every registered compensation, newest first, each a durable step.

        A compensation that fails (after its retries) does not stop the others; its error is
        kept in ``failures`` so the original error stays the one the workflow raises.
        """
        while self._compensations:
            step = self._compensations.pop()
            try:
                yield self._ctx.run(step.activity, step.input)
            except ActivityFailedError as exc:
                self.failures.append(exc)
                self._ctx.log.warning("compensation %s failed: %s", exc.activity, exc)

    def execute(
        self, body: Callable[[Saga], Generator[Command[Any], Any, Any]]
    ) -> Generator[Command[Any], Any, Any]:
        """Run ``body(saga)``; if it raises, compensate, then raise the original error."""
        try:
            return (yield from body(self))
        except Exception:
            yield from self.compensate()
            raise
