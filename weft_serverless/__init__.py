"""weft-serverless: durable execution for Python workflows, on DynamoDB or an embedded file.

Write a workflow as a generator; every ``yield`` is a durable step. See ``docs/``.
"""

from weft_serverless.commands import RetryPolicy
from weft_serverless.context import WorkflowContext
from weft_serverless.engine.engine import Engine
from weft_serverless.engine.handle import WorkflowDescription, WorkflowHandle, WorkflowSummary
from weft_serverless.engine.maintenance import MaintenanceReport
from weft_serverless.errors import (
    ActivityFailedError,
    ActivityTimeoutError,
    ChildWorkflowFailedError,
    CodecError,
    ConfigurationError,
    InvalidArgumentError,
    NondeterminismError,
    PayloadTooLargeError,
    StorageError,
    StorageLimitError,
    UnknownActivityError,
    UnknownWorkflowTypeError,
    WeftError,
    WorkflowAlreadyExistsError,
    WorkflowBuilderError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from weft_serverless.storage import MemoryStorage, SQLiteStorage
from weft_serverless.workflow import WorkflowDefinition, workflow

__version__ = "0.1.0"

__all__ = [
    "ActivityFailedError",
    "ActivityTimeoutError",
    "ChildWorkflowFailedError",
    "CodecError",
    "ConfigurationError",
    "Engine",
    "InvalidArgumentError",
    "MaintenanceReport",
    "MemoryStorage",
    "NondeterminismError",
    "PayloadTooLargeError",
    "RetryPolicy",
    "SQLiteStorage",
    "StorageError",
    "StorageLimitError",
    "UnknownActivityError",
    "UnknownWorkflowTypeError",
    "WeftError",
    "WorkflowAlreadyExistsError",
    "WorkflowBuilderError",
    "WorkflowCancelledError",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowDescription",
    "WorkflowFailedError",
    "WorkflowHandle",
    "WorkflowNotFoundError",
    "WorkflowNotRunningError",
    "WorkflowSummary",
    "__version__",
    "workflow",
]
