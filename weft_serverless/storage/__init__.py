"""Storage backends and the contract they share.

``DynamoDBStorage`` is loaded on first use, so importing this package never imports boto3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from weft_serverless.storage.base import (
    Capabilities,
    Condition,
    Delete,
    Key,
    Op,
    Put,
    Storage,
    StorageStats,
)
from weft_serverless.storage.memory import MemoryStorage
from weft_serverless.storage.sqlite import SQLiteStorage

if TYPE_CHECKING:
    from weft_serverless.storage.dynamodb import DynamoDBStorage

__all__ = [
    "Capabilities",
    "Condition",
    "Delete",
    "DynamoDBStorage",
    "Key",
    "MemoryStorage",
    "Op",
    "Put",
    "SQLiteStorage",
    "Storage",
    "StorageStats",
]


def __getattr__(name: str) -> Any:
    if name == "DynamoDBStorage":
        from weft_serverless.storage.dynamodb import DynamoDBStorage

        return DynamoDBStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
