"""Names the construct shares with the runtime, spelled again here on purpose.

``infra`` imports nothing of ``weft_serverless``, so the construct can be synthesised
without the runtime installed. ``tests/infra`` compares every name below with the
runtime's own constant, so a rename on one side fails a test instead of a deployment.
This module imports nothing, so ``build_asset.py`` can use it without loading CDK.
"""

from __future__ import annotations

PYTHON_VERSION = "3.14"
"""Lambda runtime version; ``build_asset.py`` installs wheels built for the same one."""

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "ttl"

TABLE_NAME_ENV = "WEFT_TABLE_NAME"
OFFLOAD_BUCKET_ENV = "WEFT_OFFLOAD_BUCKET"
OFFLOAD_PREFIX = "weft-values/"
"""Key prefix of offloaded values (``DynamoDBStorage``'s default); the S3 grant covers it."""
WORKFLOWS_MODULE_ENV = "WEFT_WORKFLOWS_MODULE"
OWNERSHIP_ENV = "WEFT_OWNERSHIP"
EVENT_BUS_ENV = "WEFT_EVENT_BUS"
SHARDS_ENV = "WEFT_SHARDS"
NEW_STORE_SHARDS_ENV = "WEFT_NEW_STORE_SHARDS"
PARALLEL_FIRES_ENV = "WEFT_MAINTENANCE_PARALLEL_FIRES"
SHARD_INDEXES = ("timers", "status", "claims", "visibility", "outbox")
MAX_SHARDS = 256
EVENT_SOURCE = "weft"
"""The ``Source`` of every run event (``EventBridgeSink``'s default)."""
OWNERSHIP = "workflow-lease"
"""Many Lambda containers share one table, so only per-workflow fenced claims are safe."""

API_HANDLER = "handlers.api.handler"
MAINTENANCE_HANDLER = "handlers.maintenance.handler"
TIMERS_HANDLER = "handlers.timers.handler"
TIMER_HINTS_ENV = "WEFT_TIMER_HINTS_QUEUE_URL"
"""The queue every engine function sends timer hints to (ADR 0054)."""
RUNTIME_PACKAGES = ("weft_serverless", "handlers")
"""Top-level packages every asset folder holds besides the user's workflows."""

API_ROUTES = (
    "/workflows",
    "/workflows/{proxy+}",
    "/workflow-counts",
    "/schedules",
    "/schedules/{proxy+}",
    "/activities/{proxy+}",
    "/bulk",
    "/bulk/{proxy+}",
)
"""What both API flavours (REST and HTTP API) route to the API function, with every method:
each resource of ``docs/openapi.json`` that has operations of its own, and a greedy proxy
below each that has deeper ones; routing inside them stays in the handler.
``tests/infra/test_api_contract.py`` checks that these cover every documented operation and
that each covers one at least."""
