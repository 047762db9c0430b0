"""weft-serverless: durable execution for Python workflows, on DynamoDB or an embedded file.

Write a workflow as a generator; every ``yield`` is a durable step. See ``docs/``.
"""

from weft_serverless.activity import (
    ActivityContext,
    Verification,
    activity,
    current_activity,
)
from weft_serverless.codec import jsonable
from weft_serverless.commands import RetryPolicy
from weft_serverless.concurrency import (
    Concurrency,
    ConcurrencyKeyError,
    WorkflowConcurrencyLimitExceededError,
)
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.bulk import BulkOperation
from weft_serverless.engine.bulk_request import BulkPreview
from weft_serverless.engine.engine import Engine
from weft_serverless.engine.handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from weft_serverless.engine.inspection import (
    Holder,
    Owner,
    TimelineStep,
    WorkflowHistory,
    WorkflowInspection,
    inspect_workflow,
    read_history,
    read_only_engine,
    read_owner,
    stored_ownership_mode,
)
from weft_serverless.engine.maintenance import MaintenanceReport
from weft_serverless.engine.records import STATUSES as WORKFLOW_STATUSES
from weft_serverless.engine.replay_view import ReplayView, Waiting, replay_view, waiting_for
from weft_serverless.engine.schedules.handle import ScheduleHandle
from weft_serverless.engine.schedules.manage import ScheduleDescription
from weft_serverless.errors import (
    ActivityFailedError,
    ActivityReconciliationError,
    ActivityTokenNotFoundError,
    ChildWorkflowFailedError,
    ClockSkewDetected,
    CodecError,
    CommandNotYieldedError,
    ConfigurationError,
    EngineLeaseLostError,
    EngineLeaseUnavailableError,
    InvalidArgumentError,
    NondeterminismError,
    OwnershipModeMismatchError,
    PayloadTooLargeError,
    StorageError,
    StorageLimitError,
    UnknownActivityError,
    UnknownQueryError,
    UnknownUpdateError,
    UnknownWorkflowTypeError,
    UnsupportedSchemaVersionError,
    UpdateFailedError,
    UpdateValidationError,
    VersionMismatchError,
    WeftError,
    WorkflowAlreadyExistsError,
    WorkflowBuilderError,
    WorkflowBusyError,
    WorkflowCancelledError,
    WorkflowClaimLost,
    WorkflowClaimUnavailableError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    WorkflowTimedOutError,
    WorkflowWakeDiscarded,
)
from weft_serverless.errors_activity import (
    ActivityCancelledError,
    ActivityTimedOutError,
    ActivityTimeoutError,
)
from weft_serverless.errors_bulk import BulkConfirmationError, BulkOperationNotFoundError
from weft_serverless.errors_finalizers import TeardownPendingError
from weft_serverless.errors_history import HistoryLimitExceededError
from weft_serverless.errors_services import (
    MissingServiceError,
    ServicesUnavailableError,
    UnknownServiceError,
)
from weft_serverless.errors_visibility import (
    InvalidFilterError,
    InvalidTagError,
    SearchAttributeError,
)
from weft_serverless.event_sink import EventBridgeSink, EventSink
from weft_serverless.identifiers import MAX_DEDUP_ID_BYTES, MAX_NAME_BYTES, MAX_WORKFLOW_ID_BYTES
from weft_serverless.saga import Saga
from weft_serverless.schedule_errors import (
    InvalidScheduleError,
    ScheduleAlreadyExistsError,
    ScheduleNotFoundError,
)
from weft_serverless.storage import MemoryStorage, SQLiteStorage
from weft_serverless.workflow import WorkflowDefinition, workflow

__version__ = "0.1.0"

__all__ = [
    "MAX_DEDUP_ID_BYTES",
    "MAX_NAME_BYTES",
    "MAX_WORKFLOW_ID_BYTES",
    "WORKFLOW_STATUSES",
    "ActivityCancelledError",
    "ActivityContext",
    "ActivityFailedError",
    "ActivityReconciliationError",
    "ActivityTimedOutError",
    "ActivityTimeoutError",
    "ActivityTokenNotFoundError",
    "BulkConfirmationError",
    "BulkOperation",
    "BulkOperationNotFoundError",
    "BulkPreview",
    "ChildWorkflowFailedError",
    "ClockSkewDetected",
    "CodecError",
    "CommandNotYieldedError",
    "Concurrency",
    "ConcurrencyKeyError",
    "ConfigurationError",
    "Engine",
    "EngineLeaseLostError",
    "EngineLeaseUnavailableError",
    "EventBridgeSink",
    "EventSink",
    "HistoryLimitExceededError",
    "Holder",
    "InvalidArgumentError",
    "InvalidFilterError",
    "InvalidScheduleError",
    "InvalidTagError",
    "MaintenanceReport",
    "MemoryStorage",
    "MissingServiceError",
    "NondeterminismError",
    "Owner",
    "OwnershipModeMismatchError",
    "PayloadTooLargeError",
    "ReplayView",
    "RetryPolicy",
    "SQLiteStorage",
    "Saga",
    "ScheduleAlreadyExistsError",
    "ScheduleDescription",
    "ScheduleHandle",
    "ScheduleNotFoundError",
    "SearchAttributeError",
    "ServicesUnavailableError",
    "StorageError",
    "StorageLimitError",
    "TeardownPendingError",
    "TimelineStep",
    "UnknownActivityError",
    "UnknownQueryError",
    "UnknownServiceError",
    "UnknownUpdateError",
    "UnknownWorkflowTypeError",
    "UnsupportedSchemaVersionError",
    "UpdateFailedError",
    "UpdateValidationError",
    "Verification",
    "VersionMismatchError",
    "Waiting",
    "WeftError",
    "WorkflowAlreadyExistsError",
    "WorkflowBuilderError",
    "WorkflowBusyError",
    "WorkflowCancelledError",
    "WorkflowClaimLost",
    "WorkflowClaimUnavailableError",
    "WorkflowConcurrencyLimitExceededError",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowDescription",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowHistory",
    "WorkflowInspection",
    "WorkflowNotFoundError",
    "WorkflowNotRunningError",
    "WorkflowSummary",
    "WorkflowTimedOutError",
    "WorkflowWakeDiscarded",
    "__version__",
    "activity",
    "current_activity",
    "inspect_workflow",
    "jsonable",
    "read_history",
    "read_only_engine",
    "read_owner",
    "replay_view",
    "stored_ownership_mode",
    "waiting_for",
    "workflow",
]
