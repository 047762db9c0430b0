"""The WeftError hierarchy: every public error carries a stable ``code`` (its class name).

A caller can catch ``WeftError`` for anything the engine raises on purpose, and switch on
``code`` without importing the class. Messages say what to do, not only what went wrong.
Every public error and warning lives here, grouped by concept; this module imports nothing
of the engine, so any layer may raise them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

# -- The root -------------------------------------------------------------------------------


class WeftError(Exception):
    """Root of every error the engine raises on purpose."""

    @property
    def code(self) -> str:
        return type(self).__name__

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take keyword-rich constructors; pickling keeps the message and fields.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[WeftError], args: tuple[Any, ...], state: dict[str, Any]) -> WeftError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


# -- Setting up an engine or a workflow (``Engine.create``, ``workflow(...)``) --------------


class ConfigurationError(WeftError):
    """An engine or workflow was set up wrongly (bad option, bad timing, unknown name)."""


class WorkflowBuilderError(ConfigurationError):
    """A workflow definition is malformed; ``issues`` lists every problem found at once."""

    def __init__(self, name: str, issues: list[str]) -> None:
        super().__init__(f"workflow {name!r} is not valid: " + "; ".join(issues))
        self.workflow_name = name
        self.issues = issues


class UnknownActivityError(ConfigurationError):
    """A workflow called ``ctx.run`` with an activity its definition does not declare."""


class UnknownWorkflowTypeError(ConfigurationError):
    """The engine was asked to start or recover a workflow type it has not registered."""


# -- Arguments and values a call cannot accept, raised before anything is written -----------


class InvalidArgumentError(WeftError):
    """A call received a value it cannot accept; the message names the argument.

    ``field`` names the argument too, when one is to blame, so an HTTP layer can point at it.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class CommandNotYieldedError(InvalidArgumentError):
    """A workflow made a durable command (``ctx.run(...)`` and the like) and never yielded it,
    so it never ran; the run fails rather than complete without it."""

    def __init__(self, signatures: list[str]) -> None:
        listed = ", ".join(signatures)
        super().__init__(
            f"the workflow made {listed} but never yielded it, so it did not run; "
            "write `result = yield ctx.run(...)` (or pass it to ctx.all/ctx.race and yield that)"
        )
        self.signatures = signatures


class CodecError(WeftError):
    """A value cannot be encoded; ``path`` points at the offending part (e.g. ``input['a'][2]``)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class PayloadTooLargeError(WeftError):
    """An encoded value exceeds the configured limit; raised before anything is written."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {size} bytes encoded, over the limit of {limit} bytes; "
            "store large data elsewhere (for example S3) and pass a reference"
        )
        self.what = what
        self.size = size
        self.limit = limit


# -- Runs: starting, finding and ending them ------------------------------------------------


class WorkflowAlreadyExistsError(WeftError):
    """A workflow with this id exists and the start carried no matching idempotency key."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} already exists; use another id, or pass the same "
            "idempotency_key to get the existing run back"
        )
        self.workflow_id = workflow_id


class WorkflowNotFoundError(WeftError):
    """No workflow with this id is stored."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"workflow {workflow_id!r} not found")
        self.workflow_id = workflow_id


class WorkflowNotRunningError(WeftError):
    """The call needs a workflow that has not finished, and this one has."""

    def __init__(self, workflow_id: str, status: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is {status}; this call needs a running workflow"
        )
        self.workflow_id = workflow_id
        self.status = status


class WorkflowBusyError(WeftError):
    """The workflow is being driven by this engine right now; retry shortly."""


class WorkflowFailedError(WeftError):
    """The workflow ended ``failed``; carries the remote error's type and message."""

    def __init__(self, workflow_id: str, error_type: str, error_message: str) -> None:
        super().__init__(f"workflow {workflow_id!r} failed: {error_type}: {error_message}")
        self.workflow_id = workflow_id
        self.error_type = error_type
        self.error_message = error_message


class WorkflowTimedOutError(WorkflowFailedError):
    """The workflow ran past its ``execution_timeout``."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(workflow_id, "WorkflowTimedOutError", "execution timeout reached")


class WorkflowCancelledError(WeftError):
    """The workflow was cancelled before it finished."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"workflow {workflow_id!r} was cancelled")
        self.workflow_id = workflow_id


class ChildWorkflowFailedError(WeftError):
    """A child workflow ended without a result; thrown into the parent at its yield."""

    def __init__(self, child_id: str, status: str, error_type: str, error_message: str) -> None:
        super().__init__(f"child workflow {child_id!r} {status}: {error_type}: {error_message}")
        self.child_id = child_id
        self.status = status
        self.error_type = error_type
        self.error_message = error_message


class TeardownPendingError(WeftError):
    """The run's finalizers have not all run yet (its teardown is pending): it cannot be
    purged or retried until they have."""

    def __init__(self, workflow_id: str, action: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} still has finalizers to run (its teardown is pending); "
            f"wait until describe().teardown shows it completed, then {action} again"
        )
        self.workflow_id = workflow_id


# -- Replay, versions and bounded history ---------------------------------------------------


class NondeterminismError(WeftError):
    """Replay met a different durable operation than the one stored at that step."""

    def __init__(self, step: str, stored: str, current: str) -> None:
        super().__init__(
            f"step {step}: the stored history has {stored!r} but the workflow code now yields "
            f"{current!r}; durable operations must keep their order for runs in flight "
            "(use ctx.get_version or a new workflow version to change them)"
        )
        self.step = step
        self.stored = stored
        self.current = current


class VersionMismatchError(WeftError):
    """A run started on a workflow version this definition does not accept."""

    def __init__(self, workflow_id: str, run_version: str, code_version: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} started on version {run_version!r} but the registered "
            f"definition is version {code_version!r}; keep the old definition deployed for "
            f"in-flight runs, or declare compatible_versions=({run_version!r},)"
        )
        self.workflow_id = workflow_id
        self.run_version = run_version
        self.code_version = code_version


class HistoryLimitExceededError(WeftError):
    """A run would commit more step records than its workflow's ``max_history`` allows.

    The run ends ``failed`` with this error instead of growing without bound; ``count`` is
    the number of step records it had committed, ``limit`` the declared bound.
    """

    def __init__(self, workflow_id: str, count: int, limit: int) -> None:
        self.reason = (
            f"the run has committed {count} step records and its workflow allows at most "
            f"{limit} (max_history)"
        )
        super().__init__(
            f"workflow {workflow_id!r}: {self.reason}; raise max_history, or end long-lived "
            "loops with `yield ctx.continue_as_new(state)` (a fresh history, same id)"
        )
        self.workflow_id = workflow_id
        self.count = count
        self.limit = limit


# -- Concurrency limits per workflow type and key (ADR 0025) --------------------------------


class WorkflowConcurrencyLimitExceededError(WeftError):
    """A start found ``limit`` runs of this workflow type and concurrency key active.

    Nothing was stored; start again once one of them has ended (or declare the workflow
    with ``Concurrency(..., on_limit="queue")`` to have the start wait its turn).
    """

    def __init__(self, workflow_type: str, key: str, limit: int) -> None:
        super().__init__(
            f"workflow type {workflow_type!r} already has {limit} active run(s) for "
            f"concurrency key {key!r} (limit {limit}); retry after one ends, or declare it "
            "with on_limit='queue'"
        )
        self.workflow_type = workflow_type
        self.key = key
        self.limit = limit


class ConcurrencyKeyError(InvalidArgumentError):
    """A workflow's concurrency ``key`` function raised, or returned something not a string.

    Raised at the start call, before anything is written.
    """


# -- Activities: failures, time limits, cancellation, async tokens, reconciliation ----------


class ActivityFailedError(WeftError):
    """An activity failed for good (retries exhausted or non-retryable).

    Thrown into the workflow at the ``ctx.run`` yield, live and on replay alike, so the
    workflow sees the same exception whether or not the process restarted.
    """

    def __init__(self, activity: str, error_type: str, error_message: str, attempts: int) -> None:
        super().__init__(
            f"activity {activity!r} failed after {attempts} attempt(s): "
            f"{error_type}: {error_message}"
        )
        self.activity = activity
        self.error_type = error_type
        self.error_message = error_message
        self.attempts = attempts


TimeoutKind = Literal["start_to_close", "heartbeat", "schedule_to_close"]


TIMEOUT_KINDS: tuple[TimeoutKind, ...] = ("start_to_close", "heartbeat", "schedule_to_close")


class ActivityTimeoutError(WeftError):
    """An activity passed one of its time limits; ``kind`` says which.

    ``start_to_close``: one attempt ran past its ``timeout``; ``heartbeat``: an attempt went
    longer than ``heartbeat_timeout`` without heartbeating (both retried per the policy);
    ``schedule_to_close``: the step's budget across all attempts and backoffs ran out (never
    retried).
    """

    def __init__(self, message: str, kind: TimeoutKind = "start_to_close") -> None:
        super().__init__(message)
        self.kind: TimeoutKind = kind


class ActivityTimedOutError(ActivityFailedError, ActivityTimeoutError):
    """A ``ctx.run`` step that failed because a time limit passed: what the workflow catches
    at the yield, an ``ActivityFailedError`` and an ``ActivityTimeoutError`` at once."""

    def __init__(self, activity: str, error_message: str, attempts: int, kind: TimeoutKind) -> None:
        ActivityFailedError.__init__(
            self, activity, "ActivityTimeoutError", error_message, attempts
        )
        self.kind = kind


class ActivityCancelledError(WeftError):
    """What an activity may raise once ``current_activity().cancelled`` is set, to stop.

    The engine discards whatever a given-up attempt ends with, so raising it (or returning)
    only ends the attempt sooner; raised without a cancel it is an ordinary failed attempt.
    """


class ActivityTokenNotFoundError(WeftError):
    """The async-activity token is unknown, or was already used."""


class ActivityReconciliationError(WeftError):
    """An idempotent activity may have run before a crash and its verifier could not tell."""


# -- Activity services (``Engine.create(services=...)``) ------------------------------------


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


# -- Updates and queries --------------------------------------------------------------------


class UpdateValidationError(WeftError):
    """An update was rejected by its validator; nothing was stored.

    ``issues`` lists ``{"message": ..., "path": [...] or None}`` entries.
    """

    def __init__(self, issues: list[dict[str, object]] | str) -> None:
        if isinstance(issues, str):
            issues = [{"message": issues, "path": None}]
        text = "; ".join(str(issue.get("message")) for issue in issues)
        super().__init__(f"update rejected: {text}")
        self.issues = issues


class UpdateFailedError(WeftError):
    """An update handler raised; nothing was stored and the workflow is unchanged."""

    def __init__(self, name: str, error_type: str, error_message: str) -> None:
        super().__init__(f"update {name!r} failed: {error_type}: {error_message}")
        self.update_name = name
        self.error_type = error_type
        self.error_message = error_message


class UnknownUpdateError(WeftError):
    """The workflow has no handler for this update name (at its current point)."""


class UnknownQueryError(WeftError):
    """The workflow has no handler for this query name (at its current point)."""


# -- Search attributes, tags and list filters (ADR 0030) ------------------------------------


class SearchAttributeError(InvalidArgumentError):
    """A search attribute is not declared by the workflow type, or its value has the wrong
    type; nothing was written."""


class InvalidTagError(InvalidArgumentError):
    """A run's tags break the documented limits (count, length, characters); nothing was
    written."""


class InvalidFilterError(InvalidArgumentError):
    """A list or count filter cannot be applied: unknown operator, malformed value, bad
    ``group_by`` or ``order``."""


# -- Schedules ------------------------------------------------------------------------------


class InvalidScheduleError(InvalidArgumentError):
    """A schedule's definition cannot be used (cron, interval, time zone, overlap, window);
    ``field`` names the argument to fix. Nothing was stored."""


class ScheduleAlreadyExistsError(WeftError):
    """A schedule with this id exists; update it, or delete it first."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} already exists; use get_schedule(...).update(...) to "
            "change it, or delete it first"
        )
        self.schedule_id = schedule_id


class ScheduleNotFoundError(WeftError):
    """No schedule has this id (never created, or deleted)."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} does not exist; list_schedules() shows the ones that do"
        )
        self.schedule_id = schedule_id


# -- Bulk operations (``cancel_all``, ``signal_all``, ``retry_failed_all``; ADR 0031) -------


class BulkConfirmationError(WeftError):
    """A bulk operation was called without the token of its dry run, or with a token that is
    malformed, expired, or was issued for another operation, arguments or filter. Nothing
    was done; ``reason`` says which (``missing``, ``malformed``, ``expired``, ``mismatch``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(
            f"bulk operation not confirmed ({reason}): {detail}; call it with dry_run=True "
            "first, check the count, then call it again with confirm=<the token returned>"
        )
        self.reason = reason


class BulkOperationNotFoundError(WeftError):
    """No bulk operation is stored under this id (see ``list_bulk_operations``)."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(
            f"no bulk operation {operation_id!r}; list_bulk_operations() shows the stored ones"
        )
        self.operation_id = operation_id


# -- Storage --------------------------------------------------------------------------------


class StorageError(WeftError):
    """A storage backend failed or refused a request."""


class StorageLimitError(StorageError):
    """A request breaks a backend limit; ``limit`` names it, ``actual`` and ``maximum`` size it.

    Raised before anything is sent, so nothing was written.
    """

    def __init__(self, limit: str, actual: int, maximum: int, detail: str = "") -> None:
        over = actual - maximum
        msg = f"{limit}: {actual} exceeds the maximum of {maximum} by {over}"
        super().__init__(msg + (f" ({detail})" if detail else ""))
        self.limit = limit
        self.actual = actual
        self.maximum = maximum


class InvalidKeyError(StorageError):
    """A storage key is empty, not ASCII, or too long for the backend."""


class StorageUnavailableError(StorageError):
    """The backend did not answer within the retry budget; the outcome may be unknown."""


class StorageRequestError(StorageError):
    """The backend refused a request as malformed or not allowed; retrying cannot help.

    Raised for DynamoDB's ``ValidationException`` (a bug in the adapter or the caller),
    ``IdempotentParameterMismatch`` (one commit token carried two different requests),
    a missing table or denied access. ``service_code`` and ``service_message`` quote the
    service, and nothing of the refused request was applied.
    """

    def __init__(self, operation: str, service_code: str, service_message: str) -> None:
        super().__init__(f"{operation} was refused: {service_code}: {service_message}")
        self.operation = operation
        self.service_code = service_code
        self.service_message = service_message


class StorageRetriesExhaustedError(StorageUnavailableError):
    """The retry budget ran out; ``outcome_unknown`` says whether a write may have landed.

    When ``outcome_unknown`` is true an attempt was sent and its answer lost, so the write
    may or may not have been applied: read the keys back before deciding what to do.
    """

    def __init__(self, operation: str, attempts: int, outcome_unknown: bool, last: str) -> None:
        outcome = (
            "the outcome is UNKNOWN (an attempt may have been applied); read the keys back"
            if outcome_unknown
            else "nothing was applied"
        )
        super().__init__(
            f"{operation} gave up after {attempts} attempt(s) within its time budget; "
            f"{outcome}; last error: {last}"
        )
        self.operation = operation
        self.attempts = attempts
        self.outcome_unknown = outcome_unknown


class StorageIntegrityError(StorageError):
    """A stored value failed its digest check, or its offloaded copy is missing."""


class UnsupportedSchemaVersionError(WeftError):
    """A stored record is in a format this engine does not know, e.g. written by a newer release.

    The engine refuses to act on it and leaves it exactly as stored, so running an older
    release (a rollback) can never misread or overwrite newer data.
    """

    def __init__(self, what: str, found: object, supported: tuple[int, ...]) -> None:
        known = ", ".join(str(version) for version in supported)
        super().__init__(
            f"{what} has schema version {found!r}, but this engine reads only version(s) "
            f"{known}; upgrade this engine to the weft-serverless release that wrote it, or a "
            "newer one (the record was left untouched)"
        )
        self.what = what
        self.found = found
        self.supported = supported


# -- Ownership: modes, claims and leases, and the warnings of an engine that steps back -----


class OwnershipModeMismatchError(ConfigurationError):
    """The store was set up for another ownership mode than this engine's."""

    def __init__(self, configured_mode: str, stored_mode: str, established_at: float) -> None:
        super().__init__(
            f"this engine uses ownership={configured_mode!r} but the store was established "
            f"with {stored_mode!r} at {established_at}; run every engine on one store in the "
            "same mode (change modes only with all engines stopped)"
        )
        self.configured_mode = configured_mode
        self.stored_mode = stored_mode
        self.established_at = established_at


class WorkflowClaimUnavailableError(WeftError):
    """Another engine holds this workflow's claim; retry later or on that engine."""

    def __init__(self, workflow_id: str, held_by: str) -> None:
        super().__init__(
            f"workflow {workflow_id!r} is held by engine {held_by!r}; retry after it parks "
            "or its claim expires"
        )
        self.workflow_id = workflow_id
        self.held_by = held_by


class EngineLeaseUnavailableError(WeftError):
    """ownership='lease': another engine holds the store-wide lease."""

    def __init__(self, held_by: str, expires_at: float) -> None:
        super().__init__(
            f"the store-wide lease is held by engine {held_by!r} until {expires_at}; "
            "stop that engine or wait for the lease to expire"
        )
        self.held_by = held_by
        self.expires_at = expires_at


class EngineLeaseLostError(WeftError):
    """ownership='lease': this engine lost the store-wide lease and stopped itself."""


class WorkflowClaimLost(RuntimeWarning):
    """This engine lost a workflow's claim; it stopped driving that workflow."""


class ClockSkewDetected(RuntimeWarning):
    """This engine's clock runs ahead of the store's by more than ``max_clock_skew``.

    While it does, the engine takes over no claim and fires timers by the store's clock.
    """


class WorkflowWakeDiscarded(RuntimeWarning):
    """A wake-up was dropped because this engine does not own the workflow."""
