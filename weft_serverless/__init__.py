"""weft-serverless: durable execution for Python workflows, on DynamoDB or an embedded file.

Write a workflow as a generator; every ``yield`` is a durable step. See ``docs/``.
"""

from weft_serverless.activity import (
    ActivityContext,
    Verification,
    activity,
    current_activity,
)
from weft_serverless.commands import RetryPolicy
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.engine import Engine
from weft_serverless.engine.handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from weft_serverless.engine.maintenance import MaintenanceReport
from weft_serverless.errors import (
    ActivityFailedError,
    ActivityReconciliationError,
    ActivityTimeoutError,
    ActivityTokenNotFoundError,
    ChildWorkflowFailedError,
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
from weft_serverless.saga import Saga
from weft_serverless.storage import MemoryStorage, SQLiteStorage
from weft_serverless.workflow import WorkflowDefinition, workflow

__version__ = "0.1.0"

__all__ = [
    "ActivityContext",
    "ActivityFailedError",
    "ActivityReconciliationError",
    "ActivityTimeoutError",
    "ActivityTokenNotFoundError",
    "ChildWorkflowFailedError",
    "CodecError",
    "CommandNotYieldedError",
    "ConfigurationError",
    "Engine",
    "EngineLeaseLostError",
    "EngineLeaseUnavailableError",
    "InvalidArgumentError",
    "MaintenanceReport",
    "MemoryStorage",
    "NondeterminismError",
    "OwnershipModeMismatchError",
    "PayloadTooLargeError",
    "RetryPolicy",
    "SQLiteStorage",
    "Saga",
    "StorageError",
    "StorageLimitError",
    "UnknownActivityError",
    "UnknownQueryError",
    "UnknownUpdateError",
    "UnknownWorkflowTypeError",
    "UpdateFailedError",
    "UpdateValidationError",
    "Verification",
    "VersionMismatchError",
    "WeftError",
    "WorkflowAlreadyExistsError",
    "WorkflowBuilderError",
    "WorkflowBusyError",
    "WorkflowCancelledError",
    "WorkflowClaimLost",
    "WorkflowClaimUnavailableError",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowDescription",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowNotFoundError",
    "WorkflowNotRunningError",
    "WorkflowSummary",
    "WorkflowTimedOutError",
    "WorkflowWakeDiscarded",
    "__version__",
    "activity",
    "current_activity",
    "workflow",
]
