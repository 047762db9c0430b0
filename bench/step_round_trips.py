"""Round trips a plain step waits for on DynamoDB under workflow-lease (ADR 0057).

In-process moto serialises every request and answers in about a millisecond, so alone it
cannot show requests that travel side by side. A botocore hook, registered ahead of moto's
own, sleeps ``--latency`` milliseconds in every data-plane request before moto sees it (so
concurrent requests wait their latency together, as on the network): the model of a round
trip to DynamoDB.

For each record size (a 100 B and a 700 B result: an op record of about 180 and 780 bytes),
each step's work (none, or one round trip of its own: the activity sleeps the latency) and
each run length (``--lengths``, default 10, 100, 1,000 steps), one run of that many plain
steps, driven inline by a manual engine:

- ``before``: the write-out of the step before lands, then the head put (the engine with its
  overlap switched off: the protocol of ADR 0037);
- ``after``: the write-out sent beside the head put, which carries both steps when they fit
  in one write unit, and otherwise started as soon as its head landed (ADR 0057).

Printed per step: wall milliseconds, requests sent, and round trips waited for, which is
(wall - the step's own work - the same run's wall at zero latency) / latency: what the
latency adds to a step, in round trips. Run: ``python bench/step_round_trips.py`` (about
two minutes at the defaults); ``--lengths 10,100 --latency 10`` for a quicker look.
WRU per step are unchanged by the overlap (the same items, the same sizes): ``python
bench/between_steps.py`` bills them from the wire.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from weft_serverless import Engine, workflow
from weft_serverless.engine.ownership.workflow_lease import WorkflowLease
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.testing import moto_dynamodb

CONTROL_PLANE = {"CreateTable", "DescribeTable", "DeleteTable", "UpdateTimeToLive"}


class Latency:
    """Sleeps ``seconds`` in every data-plane request, outside moto's lock; counts them."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.requests = 0

    def __call__(self, model: Any = None, **_: Any) -> None:
        if model is not None and model.name in CONTROL_PLANE:
            return
        self.requests += 1
        if self.seconds:
            time.sleep(self.seconds)


def flow(result_bytes: int, work: float) -> Any:
    body = "x" * result_bytes

    def payload(index: int) -> str:
        if work:
            time.sleep(work)
        return body

    def steps(ctx: Any, count: int) -> Generator[Any, Any, int]:
        for index in range(count):
            yield ctx.run("payload", index)
        return count

    return workflow("steps").activities(payload=payload).execute(steps)


def one_run(
    moto: Any, latency: Latency, *, steps: int, size: int, work: float, overlap: bool
) -> tuple[float, int]:
    """Wall seconds and requests of ``steps`` plain steps, the start and end excluded (the
    difference from a run of one step)."""
    storage = DynamoDBStorage(moto.create_table(), client=moto.client)
    engine = Engine.create(
        storage,
        {"steps": flow(size, work)},
        ownership="workflow-lease",
        background_tasks="manual",
    )
    fence = engine.runtime.fence
    assert isinstance(fence, WorkflowLease)
    if not overlap:
        fence.overlap = None
    figures = []
    for count in (1, steps + 1):
        sent, start = latency.requests, time.perf_counter()
        assert engine.start("steps", count, id=f"run-{count}").result() == count
        figures.append((time.perf_counter() - start, latency.requests - sent))
    engine.close()
    return figures[1][0] - figures[0][0], figures[1][1] - figures[0][1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--lengths", default="10,100,1000", help="steps per run")
    parser.add_argument("--latency", type=float, default=5.0, help="ms per request")
    parser.add_argument("--sizes", default="100,700", help="result bytes per step")
    args = parser.parse_args(argv)
    logging.getLogger("weft_serverless").setLevel(logging.ERROR)
    lengths = [int(n) for n in args.lengths.split(",")]
    seconds = args.latency / 1000
    latency = Latency()
    print(f"latency {args.latency:g} ms a request; per step of a run of N steps")
    print(
        f"{'result':>6} {'work':>5} {'N':>5} {'protocol':>8} {'wall ms':>8} "
        f"{'requests':>8} {'round trips waited':>18}"
    )
    with moto_dynamodb() as moto:
        moto.client.meta.events.register_first("before-send.dynamodb", latency)
        for size in [int(n) for n in args.sizes.split(",")]:
            for work_trips in (0, 1):
                work = work_trips * seconds
                for steps in lengths:
                    for overlap in (False, True):
                        latency.seconds = 0.0
                        bare, _ = one_run(
                            moto, latency, steps=steps, size=size, work=0.0, overlap=overlap
                        )
                        latency.seconds = seconds
                        wall, sent = one_run(
                            moto, latency, steps=steps, size=size, work=work, overlap=overlap
                        )
                        waited = (wall - steps * work - bare) / seconds / steps
                        print(
                            f"{size:>5}B {work_trips:>4}RT {steps:>5} "
                            f"{'after' if overlap else 'before':>8} {wall / steps * 1000:>8.2f} "
                            f"{sent / steps:>8.2f} {waited:>18.2f}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
