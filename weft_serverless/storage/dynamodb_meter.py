"""Item sizes and request units for DynamoDB, computed by the published billing rules.

One function, ``item_size``, sizes an item both for the 400 KB limit check and for the meter,
so the two can never disagree. Units are estimated locally rather than read from
``ConsumedCapacity``, because emulators report nothing faithful and the cost per step must be
measurable without an AWS account.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
TRANSACTION_MULTIPLIER = 2
# us-east-1 on-demand list prices per unit (see docs/storage-dynamodb.md); re-check before quoting.
WRITE_UNIT_PRICE_USD = 0.625 / 1_000_000
READ_UNIT_PRICE_USD = 0.125 / 1_000_000


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes DynamoDB counts for one attribute value (without its name).

    Strings count their UTF-8 bytes and binaries their raw bytes; a number counts about one
    byte per two significant digits plus one; documents add 3 bytes and 1 per element.
    """
    (kind, data), *_ = value.items()
    if kind == "S":
        return len(str(data).encode("utf-8"))
    if kind == "B":
        return len(bytes(data))
    if kind == "N":
        digits = str(data).lstrip("-").replace(".", "").strip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(attribute_size(item) + 1 for item in data)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in data.items())
    if kind in ("SS", "BS", "NS"):
        return sum(attribute_size({kind[0]: member}) for member in data)
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes DynamoDB counts for an item: every attribute name plus value, in UTF-8."""
    return sum(len(name.encode("utf-8")) + attribute_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """Write units for one standard write of an item of ``size`` bytes (1 KB each, min 1)."""
    return max(1, -(-size // WRITE_UNIT_BYTES))


def read_units(size: int) -> int:
    """Read units for one strongly consistent read of ``size`` bytes (4 KB each, min 1)."""
    return max(1, -(-size // READ_UNIT_BYTES))


@dataclass(frozen=True, slots=True)
class OperationTotals:
    """Totals for one DynamoDB (or S3) operation kind."""

    requests: int = 0
    read_units: int = 0
    write_units: int = 0

    def __add__(self, other: OperationTotals) -> OperationTotals:
        return OperationTotals(
            self.requests + other.requests,
            self.read_units + other.read_units,
            self.write_units + other.write_units,
        )

    def __sub__(self, other: OperationTotals) -> OperationTotals:
        return OperationTotals(
            self.requests - other.requests,
            self.read_units - other.read_units,
            self.write_units - other.write_units,
        )


@dataclass(frozen=True, slots=True)
class MeterSnapshot:
    """A frozen copy of the meter; subtract two to get the cost of what ran in between."""

    requests: int = 0
    read_units: int = 0
    write_units: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    retries: int = 0
    by_operation: Mapping[str, OperationTotals] = field(default_factory=dict)

    def __sub__(self, before: MeterSnapshot) -> MeterSnapshot:
        ops = {
            name: totals - before.by_operation.get(name, OperationTotals())
            for name, totals in self.by_operation.items()
        }
        return MeterSnapshot(
            self.requests - before.requests,
            self.read_units - before.read_units,
            self.write_units - before.write_units,
            self.bytes_read - before.bytes_read,
            self.bytes_written - before.bytes_written,
            self.retries - before.retries,
            {name: totals for name, totals in ops.items() if totals != OperationTotals()},
        )

    def dollars(
        self,
        write_unit_price: float = WRITE_UNIT_PRICE_USD,
        read_unit_price: float = READ_UNIT_PRICE_USD,
    ) -> float:
        """On-demand DynamoDB cost of these units (S3 requests are not priced here)."""
        return self.write_units * write_unit_price + self.read_units * read_unit_price


class RequestMeter:
    """Thread-safe running totals of requests, request units and item bytes.

    Every attempt that reached the service counts as a request; units are charged once per
    answered attempt, including failed conditional writes, which DynamoDB also bills.
    Requests to S3 (offloaded values) appear under ``S3:PutObject`` / ``S3:GetObject``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, OperationTotals] = {}
        self._bytes_read = 0
        self._bytes_written = 0
        self._retries = 0

    def record(
        self,
        operation: str,
        *,
        read_units: int = 0,
        write_units: int = 0,
        bytes_read: int = 0,
        bytes_written: int = 0,
        requests: int = 1,
    ) -> None:
        """Add one answered request of ``operation`` and the units it consumed."""
        with self._lock:
            current = self._totals.get(operation, OperationTotals())
            self._totals[operation] = current + OperationTotals(requests, read_units, write_units)
            self._bytes_read += bytes_read
            self._bytes_written += bytes_written

    def record_retry(self, operation: str) -> None:
        """Count a failed attempt that will be retried (throttled, conflicted, lost)."""
        with self._lock:
            current = self._totals.get(operation, OperationTotals())
            self._totals[operation] = current + OperationTotals(requests=1)
            self._retries += 1

    @property
    def requests(self) -> int:
        return self.snapshot().requests

    @property
    def read_units(self) -> int:
        return self.snapshot().read_units

    @property
    def write_units(self) -> int:
        return self.snapshot().write_units

    def snapshot(self) -> MeterSnapshot:
        with self._lock:
            totals = dict(self._totals)
            return MeterSnapshot(
                requests=sum(t.requests for t in totals.values()),
                read_units=sum(t.read_units for t in totals.values()),
                write_units=sum(t.write_units for t in totals.values()),
                bytes_read=self._bytes_read,
                bytes_written=self._bytes_written,
                retries=self._retries,
                by_operation=totals,
            )

    def reset(self) -> None:
        with self._lock:
            self._totals.clear()
            self._bytes_read = self._bytes_written = self._retries = 0
