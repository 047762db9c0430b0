"""Building clients and the table: the only places boto3 is imported, and only when called.

Clients get short timeouts and no SDK retries, because the adapter owns retries: it must
reuse one ``ClientRequestToken`` across them and stop inside the caller's time budget,
neither of which botocore's retry layer can do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from weft_serverless.errors import ConfigurationError, StorageRequestError
from weft_serverless.storage.dynamodb_schema import TTL_ATTRIBUTE, table_spec

if TYPE_CHECKING:
    from boto3.session import Session
    from botocore.config import Config
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client


def _session(
    service: str, region: str | None, timeouts: tuple[float, float]
) -> tuple[Session, Config]:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    config = Config(
        connect_timeout=timeouts[0],
        read_timeout=timeouts[1],
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=32,
    )
    try:
        session = boto3.session.Session()
    except BotoCoreError as exc:
        raise ConfigurationError(f"cannot build the {service} client: {exc}") from None
    if (region or session.region_name) is None:
        raise ConfigurationError(
            f"no AWS region for the {service} client: pass region= or set AWS_REGION"
        )
    return session, config


def dynamodb_client(
    region: str | None, endpoint_url: str | None, timeouts: tuple[float, float]
) -> DynamoDBClient:
    session, config = _session("dynamodb", region, timeouts)
    return session.client("dynamodb", region_name=region, endpoint_url=endpoint_url, config=config)


def s3_client(region: str | None, timeouts: tuple[float, float]) -> S3Client:
    """An S3 client; its endpoint follows ``AWS_ENDPOINT_URL_S3`` when that is set."""
    session, config = _session("s3", region, timeouts)
    return session.client("s3", region_name=region, config=config)


def create_table(client: DynamoDBClient, table_name: str, *, poll: int = 1) -> None:
    """Create the table from ``table_spec`` if missing, wait for ACTIVE, enable TTL on ``ttl``.

    Idempotent: an existing table is waited for and gets TTL if it lacks it. Errors are
    ``StorageRequestError``s quoting DynamoDB.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        try:
            client.create_table(**table_spec(table_name))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise
        client.get_waiter("table_exists").wait(
            TableName=table_name, WaiterConfig={"Delay": poll, "MaxAttempts": 600}
        )
        ttl = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
        if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
            client.update_time_to_live(
                TableName=table_name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
            )
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = str(error.get("Code")), str(error.get("Message"))
        raise StorageRequestError("CreateTable", code, message) from None
    except BotoCoreError as exc:
        raise StorageRequestError("CreateTable", type(exc).__name__, str(exc)) from None
