"""Large values in S3: content-addressed objects behind a pointer and a digest in the item.

The item keeps ``h`` (the digest of the whole value) and ``s3`` (the object key), so byte
conditions compare ``h`` exactly as for inline values and the engine never notices. Objects
are uploaded before the item that points at them and are never deleted by the adapter,
because identical values share one object: expire them with a bucket lifecycle rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from weft_serverless.errors import StorageIntegrityError, StorageRequestError
from weft_serverless.storage.base import Key
from weft_serverless.storage.dynamodb_faults import Retrier
from weft_serverless.storage.dynamodb_items import (
    DIGEST_BYTES,
    inline_item,
    offloaded_item,
    value_digest,
)
from weft_serverless.storage.dynamodb_meter import item_size

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from weft_serverless.storage.dynamodb_items import Item

_MISSING = ("NoSuchKey", "404", "NoSuchBucket")


class Offload:
    """Where a value lives: inline up to ``threshold`` bytes, else in ``bucket`` (if any)."""

    def __init__(
        self,
        bucket: str | None,
        *,
        prefix: str,
        threshold: int,
        client: Callable[[], S3Client],
        retrier: Retrier,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.threshold = threshold
        self._client = client
        self._retrier = retrier

    def offloads(self, value: bytes) -> bool:
        return self.bucket is not None and len(value) > self.threshold

    def object_key(self, digest: bytes) -> str:
        return f"{self.prefix}{digest.hex()}"

    def item(self, key: Key, value: bytes, digest: bytes) -> Item:
        """The item that stores ``value``: inline, or a pointer to its object."""
        if self.offloads(value):
            return offloaded_item(key, self.object_key(digest), digest)
        return inline_item(key, value, digest)

    def stored_size(self, key: Key, value: bytes) -> int:
        """Size of the item storing ``value`` (what a byte condition implies about it)."""
        return item_size(self.item(key, value, bytes(DIGEST_BYTES)))

    def store(self, digest: bytes, value: bytes) -> None:
        """Upload ``value``; called before the item is written, so no pointer dangles."""
        bucket, name = self.bucket or "", self.object_key(digest)
        self._retrier.call(
            "S3:PutObject", lambda: self._client().put_object(Bucket=bucket, Key=name, Body=value)
        )
        self._retrier.meter.record("S3:PutObject", bytes_written=len(value))

    def fetch(self, name: str, digest: bytes) -> bytes:
        """Download an offloaded value and verify it against the digest in its item."""
        bucket = self.bucket
        if bucket is None:
            raise StorageIntegrityError(f"value {name!r} is in S3 but no offload_bucket is set")
        where = f"s3://{bucket}/{name}"
        try:
            body = self._retrier.call(
                "S3:GetObject",
                lambda: self._client().get_object(Bucket=bucket, Key=name)["Body"].read(),
            )
        except StorageRequestError as exc:
            if exc.service_code in _MISSING:
                raise StorageIntegrityError(f"offloaded value {where} is missing") from None
            raise
        self._retrier.meter.record("S3:GetObject", bytes_read=len(body))
        if value_digest(body) != digest:
            raise StorageIntegrityError(f"offloaded value {where} does not match its digest")
        return body
