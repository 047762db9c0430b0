"""What one fenced forward step would cost on DynamoDB under each candidate layout (ADR 0037).

The engine's own step batch is captured from a real ``workflow-lease`` run on in-process moto,
then each option's requests are issued through the DynamoDB adapter on the same key shapes
and values and billed by its meter. Where the adapter cannot express a request (a
``BatchWriteItem`` of puts), its units are computed with the meter's own ``write_units`` on
the item sizes the option would write, and the row says so. Figures are printed, nothing is
asserted. Each figure is the average over 40 steps, the head's first write included (so
0.02 of a request and a unit in (c) to (e) is the head's creation, which a run's start pays).
Run: ``python bench/fenced_step.py`` (a few seconds).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from weft_serverless import Engine, workflow
from weft_serverless.codec import encode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Condition, Key, Op, Put
from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table
from weft_serverless.storage.dynamodb_items import inline_item, value_digest
from weft_serverless.storage.dynamodb_meter import item_size, write_units

SIZES = (100, 700, 4096)
STEPS = 40  # steps per option and size: a multiple of every K below
BATCH_WRITE_ITEMS = 25  # puts per BatchWriteItem request
HEAD_SORT = "head"  # a hypothetical key shape in the run's partition; nothing stores it today
RUN = "fenced-run"
# (f) inlines a record in the head only while head and record fit in one write unit together.
HEAD_INLINE_MAX = 900


@dataclass(frozen=True)
class Captured:
    """The engine's batch for one forward step, as ``commit`` hands it to the storage."""

    conditions: tuple[Condition, ...]
    ops: tuple[Op, ...]
    epoch: bytes
    holder: bytes

    @property
    def step(self) -> Put:
        (put,) = [op for op in self.ops if op.key.sort.startswith(keys.runs.OP_PREFIX)]
        assert isinstance(put, Put)
        return put


def capture(client: Any, size: int) -> Captured:
    """Run a one-step workflow under ``workflow-lease`` and keep the step's batch."""
    table = f"weft-capture-{size}"
    create_table(client, table)
    storage = DynamoDBStorage(table, client=client)
    seen: list[Captured] = []
    original = storage.conditional_batch

    def spy(conditions: Sequence[Condition], ops: Sequence[Op]) -> bool:
        if any(op.key.sort.startswith(keys.runs.OP_PREFIX) for op in ops) and not seen:
            epoch = storage.get(keys.owner_epoch_key(RUN))
            holder = storage.get(keys.owner_holder_key(RUN))
            assert epoch is not None and holder is not None
            seen.append(Captured(tuple(conditions), tuple(ops), epoch, holder))
        return original(conditions, ops)

    storage.conditional_batch = spy  # type: ignore[method-assign]

    def result(_: int) -> str:
        return "x" * size

    def one_step(ctx, _):  # type: ignore[no-untyped-def]
        return (yield ctx.run("result", 0))

    definition = workflow("one_step").activities(result=result).execute(one_step)
    engine = Engine.create(
        storage,
        {"one_step": definition},
        ownership="workflow-lease",
        background_tasks="manual",
        recover=False,
    )
    engine.start("one_step", 0, id=RUN).result()
    engine.close()
    client.delete_table(TableName=table)
    (captured,) = seen
    return captured


def step_at(captured: Captured, n: int) -> Put:
    """Step ``n``'s op record: the captured value under step ``n``'s key."""
    return Put(keys.op_key(RUN, keys.step_slot(n)), captured.step.value)


def head_value(captured: Captured, steps: Sequence[int]) -> bytes:
    """The head item's value: the epoch and the steps not yet written out, inline."""
    record = {
        "epoch": captured.epoch,
        "steps": [(keys.step_slot(n), captured.step.value) for n in steps],
    }
    return encode(record)


@dataclass
class Computed:
    """Requests and write units an option would send but the adapter cannot express."""

    requests: int = 0
    write_units: int = 0


@dataclass
class Row:
    option: str
    size: int
    record_bytes: int
    requests: float
    wru: float
    rru: float
    note: str = ""

    @property
    def units(self) -> float:
        return self.wru + self.rru


def fresh(client: Any, name: str, captured: Captured) -> DynamoDBStorage:
    create_table(client, name)
    storage = DynamoDBStorage(name, client=client)
    storage.batch(
        [
            Put(keys.owner_epoch_key(RUN), captured.epoch),
            Put(keys.owner_holder_key(RUN), captured.holder),
        ]
    )
    return storage


def metered(
    client: Any, name: str, captured: Captured, steps: Callable[[DynamoDBStorage], Computed]
) -> tuple[float, float, float]:
    """Run ``steps`` on a fresh table: per-step requests, WRU and RRU, metered plus computed."""
    storage = fresh(client, name, captured)
    before = storage.meter.snapshot()
    computed = steps(storage)
    used = storage.meter.snapshot() - before
    client.delete_table(TableName=name)
    requests = used.requests + computed.requests
    return (
        requests / STEPS,
        (used.write_units + computed.write_units) / STEPS,
        used.read_units / STEPS,
    )


def option_a(captured: Captured) -> Callable[[DynamoDBStorage], Computed]:
    """Today: the step put (absent) plus a condition on the epoch, one 2-item transaction."""

    def steps(storage: DynamoDBStorage) -> Computed:
        for n in range(STEPS):
            put = step_at(captured, n)
            conditions = [
                Condition(put.key, None) if c.key == captured.step.key else c
                for c in captured.conditions
            ]
            assert storage.conditional_batch(conditions, [put])
        return Computed()

    return steps


def option_b(captured: Captured) -> Callable[[DynamoDBStorage], Computed]:
    """``none``: one put conditioned on the op record's absence."""

    def steps(storage: DynamoDBStorage) -> Computed:
        for n in range(STEPS):
            put = step_at(captured, n)
            assert storage.conditional_batch([Condition(put.key, None)], [put])
        return Computed()

    return steps


def option_head(captured: Captured, k: int) -> Callable[[DynamoDBStorage], Computed]:
    """A head item holding the epoch and up to ``k`` unwritten steps, compare-and-set.

    ``k == 1`` is option (c): each step first writes out the previous newest step with a
    put conditioned on absence, then swaps the head. ``k > 1`` is option (d): the head grows
    to ``k`` steps and every ``k`` steps the older ones go out in one ``BatchWriteItem``
    (which takes no condition, and which the adapter cannot send: its units are computed).
    """
    head = Key(keys.workflow_partition(RUN), HEAD_SORT)

    def steps(storage: DynamoDBStorage) -> Computed:
        computed = Computed()
        storage.put(head, head_value(captured, []))
        inline: list[int] = []
        for n in range(STEPS):
            old = head_value(captured, inline)
            if k == 1 and inline:
                out = step_at(captured, inline[0])
                assert storage.conditional_batch([Condition(out.key, None)], [out])
                inline = []
            elif len(inline) == k:
                # BatchWriteItem of the k older steps: 1 request per 25, each item billed alone.
                items = [step_at(captured, m) for m in inline]
                computed.write_units += sum(write_units(item_size(_item(i))) for i in items)
                computed.requests += -(-len(items) // BATCH_WRITE_ITEMS)
                inline = []
            inline.append(n)
            ok = storage.conditional_batch(
                [Condition(head, old)], [Put(head, head_value(captured, inline))]
            )
            assert ok
        return computed

    return steps


def option_pointer(captured: Captured) -> Callable[[DynamoDBStorage], Computed]:
    """Option (e): the step's record goes out first as its own item (put conditioned on
    absence), then the head, holding the epoch and only the newest step's slot and digest, is
    swapped. The fence stays on the head; a large result is billed once at its size."""
    head = Key(keys.workflow_partition(RUN), HEAD_SORT)

    def pointer(n: int | None) -> bytes:
        steps = [] if n is None else [(keys.step_slot(n), value_digest(captured.step.value))]
        return encode({"epoch": captured.epoch, "steps": steps})

    def steps(storage: DynamoDBStorage) -> Computed:
        storage.put(head, pointer(None))
        for n in range(STEPS):
            put = step_at(captured, n)
            assert storage.conditional_batch([Condition(put.key, None)], [put])
            old = pointer(n - 1 if n else None)
            assert storage.conditional_batch([Condition(head, old)], [Put(head, pointer(n))])
        return Computed()

    return steps


def _item(put: Put) -> dict[str, Any]:
    return inline_item(put.key, bytes(put.value), value_digest(bytes(put.value)))


def main() -> None:
    import boto3
    from moto import mock_aws

    rows: list[Row] = []
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for size in SIZES:
            captured = capture(client, size)
            record = item_size(_item(captured.step))
            req, wru, rru = metered(client, f"a-{size}", captured, option_a(captured))
            rows.append(
                Row("(a) today: step + epoch check, transaction", size, record, req, wru, rru)
            )
            req, wru, rru = metered(client, f"b-{size}", captured, option_b(captured))
            rows.append(Row("(b) none: one conditional put", size, record, req, wru, rru))
            for k in (1, 4, 10):
                fn = option_head(captured, k)
                req, wru, rru = metered(client, f"h{k}-{size}", captured, fn)
                label = "(c) head, write-out every step" if k == 1 else f"(d) head, K={k}"
                note = "" if k == 1 else "BatchWriteItem units computed"
                rows.append(Row(label, size, record, req, wru, rru, note))
            req, wru, rru = metered(client, f"e-{size}", captured, option_pointer(captured))
            rows.append(
                Row("(e) step item, then head with its digest", size, record, req, wru, rru)
            )
            inline = rows[-4] if record <= HEAD_INLINE_MAX else rows[-1]
            rows.append(
                Row(
                    f"(f) (c) to {HEAD_INLINE_MAX} B record, else (e)",
                    size,
                    record,
                    inline.requests,
                    inline.wru,
                    inline.rru,
                    "from the rows above",
                )
            )
    print(f"{'option':<46}{'result':>7}{'op rec':>8}{'req':>7}{'WRU':>7}{'RRU':>7}{'CU':>7}  note")
    for row in rows:
        print(
            f"{row.option:<46}{row.size:>7}{row.record_bytes:>8}{row.requests:>7.2f}"
            f"{row.wru:>7.2f}{row.rru:>7.2f}{row.units:>7.2f}  {row.note}"
        )


if __name__ == "__main__":
    main()
