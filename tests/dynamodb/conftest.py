"""Fixtures shared by the DynamoDB adapter tests (see ``tests/dynamodb_support.py``)."""

from dynamodb_support import dynamodb_table, moto, moto_server, s3_bucket

__all__ = ["dynamodb_table", "moto", "moto_server", "s3_bucket"]
