"""The storage contract on DynamoDB, in-process and over HTTP (moto serialised, see support)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dynamodb_support import dynamodb_backend, dynamodb_http_backend

from weft_serverless.storage.base import Storage
from weft_serverless.storage.conformance import StorageConformance


class _OnDynamoDB(StorageConformance):
    """Each test gets a fresh table; the race test uses a second handle on the same table."""

    opener: Callable[[pytest.FixtureRequest, Path], Callable[[], Storage]]

    @pytest.fixture
    def open_store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Storage]:
        return type(self).opener(request, tmp_path)

    @pytest.fixture
    def storage(self, open_store: Callable[[], Storage]) -> Storage:
        return open_store()

    @pytest.fixture
    def storage_peer(self, open_store: Callable[[], Storage]) -> Storage:
        return open_store()


@pytest.mark.storage("dynamodb")
class TestDynamoDBInProcess(_OnDynamoDB):
    opener = staticmethod(dynamodb_backend)


@pytest.mark.storage("dynamodb-http")
class TestDynamoDBOverHttp(_OnDynamoDB):
    opener = staticmethod(dynamodb_http_backend)
