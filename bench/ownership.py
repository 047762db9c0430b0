"""What ``ownership="workflow-lease"`` costs per step over ``ownership="none"``.

A sequential workflow of ``--steps`` activities, each returning ``--payload`` bytes (20 x 1 KB by
default), is started and driven inline to completion by one manual engine on an empty store, once
per ownership mode. Engine construction (mode marker, lease) is excluded; the start, every step
and the terminal commit are included. Prints, per step, storage requests and items written from
``storage.stats`` and, on DynamoDB (moto in-process, ``mock_aws``, no AWS account), the API
requests and request units from the adapter's meter, then the difference workflow-lease minus
none. Asserts nothing. Run from the repository root::

    python bench/ownership.py
    python bench/ownership.py --steps 50 --payload 4096

Also shown for context: ``lease`` (one store-wide fenced writer).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
for _name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    os.environ.setdefault(_name, "testing")

from weft_serverless import Engine, MemoryStorage, WorkflowContext, workflow  # noqa: E402
from weft_serverless.storage.base import Storage  # noqa: E402

MODES = ["none", "workflow-lease", "lease"]


def payload(size: int) -> Callable[[int], str]:
    def step(index: int) -> str:
        return f"{index:08d}".ljust(size, "x")

    return step


def sequential(ctx: WorkflowContext, spec: dict[str, int]) -> Generator[Any, Any, int]:
    total = 0
    for index in range(spec["steps"]):
        value = yield ctx.run("step", index)
        total += len(value)
    return total


@contextmanager
def memory_store() -> Iterator[Callable[[], Storage]]:
    yield MemoryStorage


@contextmanager
def dynamodb_store() -> Iterator[Callable[[], Storage]]:
    """A fresh table per call, in moto's in-process DynamoDB."""
    import boto3
    from moto import mock_aws

    from weft_serverless.storage.dynamodb import DynamoDBStorage, create_table

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")

        def fresh() -> Storage:
            name = f"bench-{uuid.uuid4().hex[:8]}"
            create_table(client, name)
            return DynamoDBStorage(name, client=client)

        yield fresh


def measure(new_store: Callable[[], Storage], mode: str, steps: int, size: int) -> dict[str, float]:
    """Cost of one run of the workflow, divided by its step count."""
    storage = new_store()
    flows = {
        "sequential": workflow("sequential").activities(step=payload(size)).execute(sequential)
    }
    engine = Engine.create(
        storage,
        flows,
        ownership=mode,
        background_tasks="manual",
        engine_id="bench",  # type: ignore[arg-type]
    )
    meter = getattr(storage, "meter", None)
    storage.stats.reset()
    before = meter.snapshot() if meter is not None else None
    began = time.perf_counter()
    handle = engine.start("sequential", {"steps": steps})
    wall = time.perf_counter() - began
    if handle.result() != steps * size:
        raise RuntimeError("the benchmark workflow did not complete")
    stats = storage.stats.snapshot()
    row = {
        "requests": stats["requests"] / steps,
        "writes": (stats["batches"] + stats["conditional_batches"]) / steps,
        "items": stats["items_written"] / steps,
        "deleted": stats["items_deleted"] / steps,
        "ms": wall / steps * 1e3,
    }
    if meter is not None and before is not None:
        used = meter.snapshot() - before
        row.update(
            api=used.requests / steps,
            rru=used.read_units / steps,
            wru=used.write_units / steps,
            usd=used.dollars() / steps * 1e6,
        )
    engine.close()
    return row


COLUMNS = [
    ("requests", "requests", 9),
    ("writes", "writes", 7),
    ("items", "items put", 10),
    ("deleted", "deleted", 8),
    ("api", "API calls", 10),
    ("rru", "RRU", 7),
    ("wru", "WRU", 7),
    ("usd", "$/1M steps", 11),
]


def print_table(title: str, rows: dict[str, dict[str, float]], steps: int) -> None:
    present = [c for c in COLUMNS if all(c[0] in r for r in rows.values())]
    print(f"\n{title}")
    print(f"{'per step':<28}" + "".join(f"{head:>{width}}" for _, head, width in present))
    for label, row in rows.items():
        print(f"{label:<28}" + "".join(f"{row[key]:>{width}.2f}" for key, _, width in present))
    base, fenced = rows["none"], rows["workflow-lease"]
    print(
        f"{'workflow-lease - none':<28}"
        + "".join(f"{fenced[key] - base[key]:>+{width}.2f}" for key, _, width in present)
    )
    print(
        f"{'  the same, per run':<28}"
        + "".join(f"{(fenced[key] - base[key]) * steps:>+{width}.1f}" for key, _, width in present)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20, help="activities in the workflow")
    parser.add_argument("--payload", type=int, default=1024, help="bytes each activity returns")
    parser.add_argument("--skip-dynamodb", action="store_true", help="memory only")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    print(
        f"weft bench/ownership.py: Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}; a sequential workflow of {args.steps} steps of {args.payload} B, "
        "driven inline by one engine (start + steps + terminal commit, per step)"
    )
    stores = [("MemoryStorage", memory_store)]
    if not args.skip_dynamodb:
        stores.append(("DynamoDBStorage on moto (in-process)", dynamodb_store))
    for title, store in stores:
        with store() as new_store:
            rows = {mode: measure(new_store, mode, args.steps, args.payload) for mode in MODES}
        print_table(title, rows, args.steps)
    print(
        "\nrequests = gets + range scans + writes as the engine issues them (storage.stats);\n"
        "API calls, RRU, WRU = DynamoDB requests and request units by the adapter's meter\n"
        "(1 KB write units, 4 KB read units, transactions doubled, a transaction's condition\n"
        "checks billed as read units); $ = those units at us-east-1 on-demand prices.\n"
        "Under none a step commit is one conditional PutItem; the epoch condition of a fencing\n"
        "mode makes it a two-item TransactWriteItems, which is where most of the extra cost is."
    )
    print(f"total {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
