"""The DynamoDB table schema, as plain data shared by ``create_table`` and the CDK construct.

Kept free of boto3 so the infrastructure tests can compare against it without the runtime.
"""

from __future__ import annotations

from typing import Any

PARTITION_ATTRIBUTE = "pk"
SORT_ATTRIBUTE = "sk"
VALUE_ATTRIBUTE = "v"
DIGEST_ATTRIBUTE = "h"
TTL_ATTRIBUTE = "ttl"
OFFLOAD_ATTRIBUTE = "s3"

TABLE_NAME_ENV = "WEFT_TABLE_NAME"
ENDPOINT_URL_ENV = "WEFT_DYNAMODB_ENDPOINT"
OFFLOAD_BUCKET_ENV = "WEFT_OFFLOAD_BUCKET"


def table_spec(table_name: str) -> dict[str, Any]:
    """Arguments for ``CreateTable``: on-demand, ``pk``/``sk`` strings, no secondary index."""
    return {
        "TableName": table_name,
        "AttributeDefinitions": [
            {"AttributeName": PARTITION_ATTRIBUTE, "AttributeType": "S"},
            {"AttributeName": SORT_ATTRIBUTE, "AttributeType": "S"},
        ],
        "KeySchema": [
            {"AttributeName": PARTITION_ATTRIBUTE, "KeyType": "HASH"},
            {"AttributeName": SORT_ATTRIBUTE, "KeyType": "RANGE"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
