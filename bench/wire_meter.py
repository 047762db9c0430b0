"""An independent DynamoDB meter on the wire: what each request sent would be billed.

It hooks the botocore client (``before-parameter-build`` keeps each request's parameters,
``after-call`` bills them with the answer), so it sees exactly what the service would see
and shares nothing with the storage adapter's own meter. The published on-demand rules:

- a write is 1 WRU per started KB of the larger of the item written and the item it
  replaces (a delete: the item deleted), at least 1; a refused conditional write is billed
  the same (1 on an absent item);
- a strongly consistent read is 1 RRU per started 4 KB (half for an eventual read), at least
  1; a ``Query`` or ``Scan`` rounds the summed size of the items it returns, not each item;
- a transaction bills every item twice, ``ConditionCheck`` items included, each checked item
  as a write of its stored size (a cancelled transaction is billed as if it had committed);
- a ``BatchWriteItem``/``BatchGetItem`` bills each item on its own.

What a request replaces or deletes is known from the meter's own copy of every item's size,
kept from the writes and reads it saw: attach it before the table holds anything. Item sizes
are DynamoDB's: every attribute name plus its value, in UTF-8.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
TRANSACTION_MULTIPLIER = 2
_PARAMS = "wire_meter_params"
_DATA_PLANE = {
    "PutItem",
    "DeleteItem",
    "UpdateItem",
    "GetItem",
    "Query",
    "Scan",
    "TransactWriteItems",
    "TransactGetItems",
    "BatchWriteItem",
    "BatchGetItem",
}

Item = Mapping[str, Mapping[str, Any]]


def attribute_size(value: Mapping[str, Any]) -> int:
    """Bytes DynamoDB counts for one attribute value (its name not included)."""
    ((kind, data),) = value.items()
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
        return 3 + sum(attribute_size(member) + 1 for member in data)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in data.items())
    if kind in ("SS", "BS", "NS"):
        return sum(attribute_size({kind[0]: member}) for member in data)
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: Item) -> int:
    """Bytes of an item: every attribute's UTF-8 name plus its value."""
    return sum(len(name.encode("utf-8")) + attribute_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """WRU of one standard write of ``size`` bytes: 1 per started KB, at least 1."""
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def read_units(size: int, consistent: bool = True) -> float:
    """RRU of one read of ``size`` bytes: 1 per started 4 KB (at least 1), half if eventual."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def key_family(partition: str, sort: str) -> str:
    """The kind of item a key names, without run ids or shard numbers.

    ``wf#{id}``/``op#00000003`` -> ``op#``; ``wf#{id}``/``owner#epoch`` -> ``owner#epoch``;
    ``wf#{id}``/``state`` -> ``state``; ``claims#02``/... -> ``claims#``;
    ``status#running#01``/... -> ``status#running#``;
    ``meta``/``lease#epoch`` -> ``meta:lease#epoch``.
    """
    if partition.startswith("wf#"):
        if sort.startswith("owner#") or "#" not in sort:
            return sort
        return sort.split("#", 1)[0] + "#"
    if partition == "meta":
        return f"meta:{sort}"
    return re.sub(r"#\d+$", "", partition) + "#"


@dataclass(frozen=True, slots=True)
class Charge:
    """One item's part of a request: its family, what was done to it, and its units."""

    family: str
    action: str  # Put, Delete, Update, ConditionCheck, Get, Query, Scan
    write_units: float = 0.0
    read_units: float = 0.0


@dataclass(frozen=True, slots=True)
class Request:
    """One data-plane request as billed: its operation, whether it succeeded, its charges."""

    operation: str
    ok: bool
    charges: tuple[Charge, ...]

    @property
    def write_units(self) -> float:
        return sum(charge.write_units for charge in self.charges)

    @property
    def read_units(self) -> float:
        return sum(charge.read_units for charge in self.charges)


@dataclass
class Tally:
    """Requests (or items), write units and read units added up."""

    count: int = 0
    write_units: float = 0.0
    read_units: float = 0.0

    def add(self, count: int, write: float, read: float) -> None:
        self.count += count
        self.write_units += write
        self.read_units += read

    def scaled(self, sign: int) -> Tally:
        return Tally(sign * self.count, sign * self.write_units, sign * self.read_units)


@dataclass
class Bill:
    """A stretch of requests summed: totals, per operation, per key family and action."""

    requests: int = 0
    write_units: float = 0.0
    read_units: float = 0.0
    by_operation: dict[str, Tally] = field(default_factory=dict)
    by_family: dict[tuple[str, str], Tally] = field(default_factory=dict)
    sent: list[Request] = field(default_factory=list)

    @classmethod
    def of(cls, requests: Iterable[Request]) -> Bill:
        bill = cls()
        for request in requests:
            bill.sent.append(request)
            bill.requests += 1
            bill.write_units += request.write_units
            bill.read_units += request.read_units
            bill.by_operation.setdefault(request.operation, Tally()).add(
                1, request.write_units, request.read_units
            )
            for charge in request.charges:
                bill.by_family.setdefault((charge.family, charge.action), Tally()).add(
                    1, charge.write_units, charge.read_units
                )
        return bill

    def _combined(self, other: Bill, sign: int) -> Bill:
        out = Bill(
            self.requests + sign * other.requests,
            self.write_units + sign * other.write_units,
            self.read_units + sign * other.read_units,
        )
        for mine, theirs, into in (
            (self.by_operation, other.by_operation, out.by_operation),
            (self.by_family, other.by_family, out.by_family),
        ):
            for name in [*mine, *(n for n in theirs if n not in mine)]:
                tally = mine.get(name, Tally()).scaled(1)
                extra = theirs.get(name, Tally()).scaled(sign)
                tally.add(extra.count, extra.write_units, extra.read_units)
                if tally != Tally():
                    into[name] = tally
        return out

    def __add__(self, other: Bill) -> Bill:
        return self._combined(other, 1)

    def __sub__(self, other: Bill) -> Bill:
        """What ``self`` cost beyond ``other`` (a pass above an idle pass), item by item."""
        return self._combined(other, -1)


class WireMeter:
    """Bills every DynamoDB data-plane request a boto3 client sends, from the wire.

    Args:
        key_attributes: The table's hash and range key attribute names.
        family: Names the kind of item a key is, for the breakdown.
    """

    def __init__(
        self,
        key_attributes: tuple[str, str] = ("pk", "sk"),
        family: Callable[[str, str], str] = key_family,
    ) -> None:
        self.key_attributes = key_attributes
        self.family = family
        self.requests: list[Request] = []
        self.control: list[str] = []  # CreateTable, DescribeTable...: not billed per request
        self.sizes: dict[tuple[str, str, str], int] = {}

    # -- hooks ---------------------------------------------------------------------------------

    def attach(self, client: Any) -> None:
        """Meter every request ``client`` sends from now on."""
        client.meta.events.register("before-parameter-build.dynamodb", self._remember)
        client.meta.events.register("after-call.dynamodb", self._after_call)

    def detach(self, client: Any) -> None:
        client.meta.events.unregister("before-parameter-build.dynamodb", self._remember)
        client.meta.events.unregister("after-call.dynamodb", self._after_call)

    def _remember(self, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_PARAMS] = copy.deepcopy(dict(params))

    def _after_call(
        self, http_response: Any, parsed: Mapping[str, Any], model: Any, context: Any, **_: Any
    ) -> None:
        params = context.get(_PARAMS, {})
        ok = http_response.status_code < 300
        self.bill(model.name, params, parsed, ok)

    # -- billing -------------------------------------------------------------------------------

    def bill(
        self, operation: str, params: Mapping[str, Any], answer: Mapping[str, Any], ok: bool
    ) -> Request | None:
        """Bill one answered request; keep the item sizes it changed. None: control plane."""
        if operation not in _DATA_PLANE:
            self.control.append(operation)
            return None
        charges, writes = self._charges(operation, params, answer, ok)
        if ok:
            for where, size in writes:
                if size is None:
                    self.sizes.pop(where, None)
                else:
                    self.sizes[where] = size
        request = Request(operation, ok, tuple(charges))
        self.requests.append(request)
        return request

    def _where(self, table: str, item: Item) -> tuple[str, str, str]:
        hash_name, range_name = self.key_attributes
        return table, str(item[hash_name]["S"]), str(item[range_name]["S"])

    def _stored(self, where: tuple[str, str, str]) -> int:
        return self.sizes.get(where, 0)

    def _write(
        self, table: str, kind: str, body: Mapping[str, Any], multiplier: int
    ) -> tuple[Charge, tuple[tuple[str, str, str], int | None] | None]:
        """One written (or checked) item's charge and, if it changes the item, its new size."""
        if kind == "Put":
            item = body["Item"]
            where = self._where(table, item)
            new = item_size(item)
            units = write_units(max(new, self._stored(where)))
            change: tuple[tuple[str, str, str], int | None] | None = (where, new)
        else:
            where = self._where(table, body["Key"])
            units = write_units(self._stored(where))
            change = (where, None) if kind == "Delete" else None
            if kind == "Update":
                change = None  # new size unknown from the request; see ``priced_updates``
        charge = Charge(self.family(where[1], where[2]), kind, units * multiplier)
        return charge, change

    def _read(self, table: str, action: str, items: list[Item], consistent: bool) -> Charge:
        for item in items:
            self.sizes[self._where(table, item)] = item_size(item)
        size = sum(item_size(item) for item in items)
        first = items[0] if items else None
        family = self.family(*self._where(table, first)[1:]) if first else "(none)"
        return Charge(family, action, read_units=read_units(size, consistent))

    def _charges(
        self, operation: str, params: Mapping[str, Any], answer: Mapping[str, Any], ok: bool
    ) -> tuple[list[Charge], list[tuple[tuple[str, str, str], int | None]]]:
        charges: list[Charge] = []
        writes: list[tuple[tuple[str, str, str], int | None]] = []

        def write(table: str, kind: str, body: Mapping[str, Any], multiplier: int = 1) -> None:
            charge, change = self._write(table, kind, body, multiplier)
            charges.append(charge)
            if change is not None:
                writes.append(change)

        table = str(params.get("TableName", ""))
        if operation in ("PutItem", "DeleteItem", "UpdateItem"):
            kind = operation.removesuffix("Item")
            item = params["Item"] if kind == "Put" else params["Key"]
            if not ok and self._where(table, item) not in self.sizes:
                # A refused write on an absent item costs 1 unit, whatever it would have put.
                where = self._where(table, item)
                charges.append(Charge(self.family(where[1], where[2]), kind, 1.0))
            else:
                write(table, kind, params)
        elif operation == "TransactWriteItems":
            for entry in params["TransactItems"]:
                ((kind, body),) = entry.items()
                write(str(body["TableName"]), kind, body, TRANSACTION_MULTIPLIER)
        elif operation == "BatchWriteItem":
            unprocessed = answer.get("UnprocessedItems") or {}
            for name, entries in params["RequestItems"].items():
                left = unprocessed.get(name, [])
                for entry in entries:
                    if entry in left:
                        continue
                    if "PutRequest" in entry:
                        write(name, "Put", entry["PutRequest"])
                    else:
                        write(name, "Delete", entry["DeleteRequest"])
        elif operation == "GetItem":
            item = answer.get("Item")
            consistent = bool(params.get("ConsistentRead"))
            if item:
                charges.append(self._read(table, "Get", [item], consistent))
            else:
                where = self._where(table, params["Key"])
                family = self.family(where[1], where[2])
                charges.append(Charge(family, "Get", read_units=read_units(0, consistent)))
        elif operation in ("Query", "Scan"):
            items = list(answer.get("Items", []))
            charge = self._read(table, operation, items, bool(params.get("ConsistentRead")))
            if operation == "Query":  # named by the range asked for, not what came back
                values = params.get("ExpressionAttributeValues", {})
                pk, low = (values.get(name, {}).get("S", "") for name in (":pk", ":lo"))
                family = self.family(pk, low) if low else self.family(pk, "")
                family = f"{family or 'wf#'}*"
                charge = Charge(family, operation, read_units=charge.read_units)
            charges.append(charge)
        elif operation == "TransactGetItems":
            for entry, found in zip(
                params["TransactItems"], answer.get("Responses", []), strict=True
            ):
                body = entry["Get"]
                item = found.get("Item")
                read = self._read(body["TableName"], "Get", [item] if item else [], True)
                if not item:
                    where = self._where(body["TableName"], body["Key"])
                    read = Charge(self.family(where[1], where[2]), "Get", read_units=1.0)
                charges.append(
                    Charge(read.family, "Get", read_units=read.read_units * TRANSACTION_MULTIPLIER)
                )
        elif operation == "BatchGetItem":
            for name, found in (answer.get("Responses") or {}).items():
                consistent = bool(params["RequestItems"][name].get("ConsistentRead"))
                for item in found:
                    charges.append(self._read(name, "Get", [item], consistent))
        return charges, writes

    # -- reading the meter ---------------------------------------------------------------------

    def mark(self) -> int:
        """A position to bill from: ``since(mark)`` sums the requests sent after it."""
        return len(self.requests)

    def since(self, mark: int) -> Bill:
        return Bill.of(self.requests[mark:])

    @property
    def priced_updates(self) -> int:
        """``UpdateItem`` requests, billed by the replaced item alone (the new size is not in
        the request); the engine sends none, so a non-zero count flags an estimate."""
        return sum(1 for request in self.requests if request.operation == "UpdateItem")
