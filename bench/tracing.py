"""What tracing adds to a step, with the real OpenTelemetry SDK.

Prints microseconds per step of a sequential run of ``--steps`` trivial activities, and per
branch of an ``all`` of ``--branches`` (activity threads), driven inline by a manual engine
on ``MemoryStorage``: without a tracer; with an SDK tracer whose spans all go to an
in-memory exporter (``SimpleSpanProcessor``, the exporter's cost included); and with
``ParentBased(ALWAYS_OFF)``, where the run's ``weft start`` span is dropped and every span
after it is a non-recording one. Also the cost of a ``start`` (the start span is made and
ended inside it). Median of ``--runs`` runs, the tracers interleaved run by run; asserts
nothing. Needs ``opentelemetry-sdk`` (a dev dependency). Run: ``python bench/tracing.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

from weft_serverless import Engine, MemoryStorage, workflow


def noop(value: int) -> int:
    return value


def sequential(ctx: Any, steps: int) -> Any:
    for index in range(steps):
        yield ctx.run("noop", index)
    return steps


def fan_out(ctx: Any, branches: int) -> Any:
    return (yield ctx.all(*(ctx.run("noop", i) for i in range(branches))))


def parked(ctx: Any, _: Any) -> Any:
    yield ctx.wait_for_signal("go")


FLOWS = {
    "seq": workflow("seq").activities(noop=noop).execute(sequential),
    "fan": workflow("fan").activities(noop=noop).execute(fan_out),
    "park": workflow("park").execute(parked),
}


def tracers() -> dict[str, Callable[[], Any]]:
    def sdk(sampler: Any = None) -> Callable[[], Any]:
        def make() -> Any:
            provider = TracerProvider() if sampler is None else TracerProvider(sampler=sampler)
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            return provider.get_tracer("bench")

        return make

    return {
        "no tracer": lambda: None,
        "OTel SDK, sampled": sdk(),
        "OTel SDK, dropped at start": sdk(ParentBased(ALWAYS_OFF)),
    }


def per_unit(tracer: Any, flow: str, size: int, run: int) -> float:
    """µs per step (``seq``), per branch (``fan``) or per start (``park``) of one run."""
    engine = Engine.create(MemoryStorage(), FLOWS, background_tasks="manual", tracer=tracer)
    began = time.perf_counter()
    if flow == "park":
        for index in range(size):
            engine.start("park", id=f"p-{run}-{index}")
    else:
        engine.start(flow, size, id=f"{flow}-{run}").result()
    elapsed = (time.perf_counter() - began) / size * 1e6
    engine.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--branches", type=int, default=32)
    parser.add_argument("--starts", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(
        f"µs per unit, median of {args.runs} runs (MemoryStorage, manual engine): "
        f"a step of {args.steps}, a branch of an all of {args.branches}, "
        f"a start of a run that parks ({args.starts})"
    )
    print(f"{'tracer':<28} {'step':>8} {'branch':>8} {'start':>8}")
    made = {name: make() for name, make in tracers().items()}
    sizes = {"seq": args.steps, "fan": args.branches, "park": args.starts}
    samples: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):  # interleaved, so a busy moment hits every tracer alike
        for name, tracer in made.items():
            for flow, size in sizes.items():
                samples.setdefault((name, flow), []).append(per_unit(tracer, flow, size, run))
    for name in made:
        step, branch, start = (statistics.median(samples[(name, f)]) for f in sizes)
        print(f"{name:<28} {step:>8.1f} {branch:>8.1f} {start:>8.1f}")


if __name__ == "__main__":
    main()
