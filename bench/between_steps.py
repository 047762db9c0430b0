"""What lies between the steps, billed from the wire: starts, fired sleeps, signals, whole runs.

Runs the scenarios through the Lambda entry points as the deployed stack runs them: the API
handler (``make_api_handler``) for ``POST /workflows`` and ``POST .../signals/{name}``, the
maintenance handler (``make_maintenance_handler``) for a pass, each function with its own
engine (two containers) on one in-process moto table, time virtual. Every DynamoDB request
is billed by ``wire_meter.WireMeter``, a botocore hook that reads each request as sent and
knows nothing of the adapter; the adapter's own meter (``storage.meter``) is printed beside.

Scenarios, per run:

- ``between``: a run that sleeps, then waits for a signal, then returns (no step at all):
  the start that parks on the sleep, the pass that fires it (the run parks on the signal),
  the signal that ends it;
- ``default run``: the capacity model's default workload (10 steps returning 700 B, a
  sleep, a signal: 4 steps, sleep, 3 steps, signal, 3 steps): start, fire, signal, and the
  clean-up pass after the end; and its ten steps, as the difference from the same run
  without steps.

Each run is measured twice: its sleep fired by the maintenance sweep (``fired sleep``), and
as the deployed stack fires it by default (ADR 0054), through a timer hint handed to the
timer hint function (``make_timer_hint_handler``, a third container): ``fired sleep
(hint)``. The hour's sleep is beyond SQS's 15 minute horizon, so its hint is sent by the
pass that sees it come within reach (not counted) and the hint function fires it when it
falls due. Only that run's functions have a hint queue: with one, every pass also reads the
timers coming within reach, four reads more than the idle pass printed here.

A pass is counted above the idle pass measured just before it (the shard reads every pass
makes whatever is due). Run: ``python bench/between_steps.py`` (about 10 s); ``--modes``,
``--detail`` (per-request lines).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "weft-bench")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "WeftBench")

from wire_meter import Bill, WireMeter

from weft_serverless import Engine, TimerHint, lambda_events, workflow
from weft_serverless.aws import LocalContext, make_api_handler, make_maintenance_handler
from weft_serverless.aws.runtime import build_engine
from weft_serverless.aws.timers import make_timer_hint_handler
from weft_serverless.hint_ports import SQS_MAX_DELAY, hint_body
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.storage.dynamodb_meter import MeterSnapshot
from weft_serverless.testing import VirtualClock, moto_dynamodb

SLEEP = 3600.0
STEPS = 10
RESULT_BYTES = 700


def result(size: int) -> str:
    return "x" * size


def staged(ctx, spec):  # type: ignore[no-untyped-def]
    """``counts[0]`` steps, a sleep, ``counts[1]`` steps, a signal, ``counts[2]`` steps."""
    for _ in range(spec["counts"][0]):
        yield ctx.run("result", spec["bytes"])
    yield ctx.sleep(SLEEP)
    for _ in range(spec["counts"][1]):
        yield ctx.run("result", spec["bytes"])
    yield ctx.wait_for_signal("go")
    for _ in range(spec["counts"][2]):
        yield ctx.run("result", spec["bytes"])
    return "done"


WORKFLOWS = {"staged": workflow("staged").activities(result=result).execute(staged)}


def split(steps: int) -> list[int]:
    """Steps spread over the three stretches around the two waits, the first ones longest."""
    return [steps // 3 + (1 if i < steps % 3 else 0) for i in range(3)]


class Monotonic:
    """A monotonic clock for the handlers' bounded waits that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 1e-6)


@dataclass
class Phase:
    """One entry point's call: the wire's bill and the adapter meter's figures for it."""

    name: str
    wire: Bill
    adapter: MeterSnapshot


class HintQueue:
    """The timer hint queue, held here: what the functions sent, for the bench to deliver."""

    horizon = SQS_MAX_DELAY

    def __init__(self) -> None:
        self.sent: list[TimerHint] = []

    def send(self, hints: Any) -> None:
        self.sent += hints


class Deployment:
    """An API function, a maintenance function and a timer hint function, each its own
    container, on one table."""

    def __init__(self, moto: Any, ownership: str, meter: WireMeter, hinted: bool) -> None:
        self.meter = meter
        self.clock = VirtualClock()
        self.monotonic = Monotonic()
        self.queue = HintQueue()
        table = moto.create_table()
        self.storages = [DynamoDBStorage(table, client=moto.client) for _ in range(3)]
        self.engines: list[Engine] = [
            build_engine(
                storage=storage,
                workflows=WORKFLOWS,
                clock=self.clock,
                ownership=ownership,
                timer_hints=self.queue if hinted else None,
            )
            for storage in self.storages
        ]
        api_engine, maintenance_engine, hint_engine = self.engines
        timing = {"sleep": self.monotonic.sleep, "monotonic": self.monotonic}
        self.api = make_api_handler(engine_factory=lambda: api_engine, **timing)
        self.maintenance = make_maintenance_handler(
            engine_factory=lambda: maintenance_engine, tick_seconds=0, **timing
        )
        self.hints = make_timer_hint_handler(
            engine_factory=lambda: hint_engine, wait=self.clock.advance
        )

    def adapter(self) -> MeterSnapshot:
        summed = MeterSnapshot()
        for storage in self.storages:
            summed = plus(summed, storage.meter.snapshot())
        return summed

    @contextlib.contextmanager
    def measured(self, name: str, out: list[Phase]) -> Iterator[None]:
        mark, before = self.meter.mark(), self.adapter()
        with contextlib.redirect_stdout(io.StringIO()):  # the handlers' EMF lines
            yield
        out.append(Phase(name, self.meter.since(mark), self.adapter() - before))

    def call_api(self, method: str, path: str, body: Any) -> dict[str, Any]:
        event = lambda_events.rest_event(
            method, path, [("Content-Type", "application/json")], json.dumps(body).encode()
        )
        response = self.api(event, LocalContext(29.0, self.monotonic))
        assert response["statusCode"] < 300, response
        return response

    def run_pass(self) -> dict[str, Any]:
        event = lambda_events.scheduled_event("us-east-1")
        return self.maintenance(event, LocalContext(55.0, self.monotonic))

    def deliver_hints(self) -> dict[str, Any]:
        """Hand what the queue holds to the timer hint function, as one SQS batch."""
        records = [
            {"messageId": str(number), "body": hint_body(hint)}
            for number, hint in enumerate(self.queue.sent)
        ]
        self.queue.sent = []
        response = self.hints({"Records": records}, LocalContext(55.0, self.monotonic))
        assert not response["batchItemFailures"], response
        return response

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


def whole_run(
    moto: Any, ownership: str, steps: int, meter: WireMeter, hinted: bool = False
) -> list[Phase]:
    """One run as Lambda runs it; phases: start, idle, fire, signal, idle, clean-up. With
    ``hinted`` its sleep is fired through a timer hint, not by the sweep."""
    deployment = Deployment(moto, ownership, meter, hinted)
    phases: list[Phase] = []
    spec = {"counts": split(steps), "bytes": RESULT_BYTES}
    with deployment.measured("start", phases):
        deployment.call_api(
            "POST", "/workflows", {"workflow_type": "staged", "id": "run-0", "input": spec}
        )
    deployment.clock.advance(60.0)
    with deployment.measured("idle pass", phases):
        deployment.run_pass()
    if hinted:
        early = SQS_MAX_DELAY - 60.0  # within the sweep's re-hint window before the horizon
        deployment.clock.advance(SLEEP - 60.0 - early)
        deployment.queue.sent = []
        deployment.run_pass()  # the sleep comes within reach: this pass sends its hint
        assert len(deployment.queue.sent) == 1, deployment.queue.sent
        deployment.clock.advance(early)
        with deployment.measured("fire pass", phases):
            deployment.deliver_hints()
        assert deployment.engines[0].describe("run-0").status == "running"
    else:
        deployment.clock.advance(SLEEP)
        with deployment.measured("fire pass", phases):
            fired = deployment.run_pass()
        assert fired["timers_fired"] == 1, fired
    deployment.queue.sent = []  # the signal drives the run inline: its hint is not needed
    with deployment.measured("signal", phases):
        deployment.call_api("POST", "/workflows/run-0/signals/go", {"payload": None})
    status = deployment.engines[0].describe("run-0").status
    assert status == "completed", status
    deployment.clock.advance(60.0)
    with deployment.measured("idle pass 2", phases):
        deployment.run_pass()
    deployment.clock.advance(SLEEP)
    with deployment.measured("clean-up pass", phases):
        deployment.run_pass()
    deployment.close()
    return phases


def between(phases: list[Phase], hinted: bool = False) -> dict[str, Phase]:
    """Each entry point's share of one run: passes above the idle pass just before them (a
    hint is counted whole: the hint function reads no shard)."""
    named = {phase.name: phase for phase in phases}
    fire, idle = named["fire pass"], named["idle pass"]
    if hinted:
        fired, fired_adapter = fire.wire, fire.adapter
    else:
        fired, fired_adapter = fire.wire - idle.wire, fire.adapter - idle.adapter
        fired.sent = fire.wire.sent  # listed whole by --detail: the idle pass's reads included
    cleanup, idle2 = named["clean-up pass"], named["idle pass 2"]
    return {
        "start": named["start"],
        "fired sleep": Phase("fired sleep", fired, fired_adapter),
        "signal to the end": named["signal"],
        "clean-up": Phase("clean-up", cleanup.wire - idle2.wire, cleanup.adapter - idle2.adapter),
        "idle pass": idle,
    }


def total(parts: dict[str, Phase]) -> Phase:
    wire, adapter = Bill(), MeterSnapshot()
    for name, phase in parts.items():
        if name != "idle pass":
            wire, adapter = wire + phase.wire, plus(adapter, phase.adapter)
    return Phase("whole run", wire, adapter)


def plus(one: MeterSnapshot, other: MeterSnapshot) -> MeterSnapshot:
    return MeterSnapshot(
        one.requests + other.requests,
        one.read_units + other.read_units,
        one.write_units + other.write_units,
    )


def figures(label: str, phase: Phase) -> str:
    wire, adapter = phase.wire, phase.adapter
    return (
        f"  {label:<22} wire {wire.requests:>4} req {wire.write_units:>6.1f} WRU "
        f"{wire.read_units:>6.1f} RRU   adapter {adapter.requests:>4} req "
        f"{adapter.write_units:>5} WRU {adapter.read_units:>5} RRU"
    )


def breakdown(phase: Phase) -> list[str]:
    lines = []
    ops = ", ".join(
        f"{name} {t.count} ({t.write_units:g} WRU, {t.read_units:g} RRU)"
        for name, t in sorted(phase.wire.by_operation.items())
        if t.count
    )
    lines.append(f"      requests: {ops or '-'}")
    written = [
        f"{family} {action} x{t.count} {t.write_units:g}"
        for (family, action), t in sorted(phase.wire.by_family.items())
        if t.write_units
    ]
    read = [
        f"{family} {action} x{t.count} {t.read_units:g}"
        for (family, action), t in sorted(phase.wire.by_family.items())
        if t.read_units and not t.write_units
    ]
    lines.append(f"      WRU by item: {'; '.join(written) or '-'}")
    lines.append(f"      RRU by item: {'; '.join(read) or '-'}")
    return lines


def requests(phase: Phase) -> list[str]:
    """One line per request sent, in order: its operation, then each item and its units."""
    lines = []
    for request in phase.wire.sent:
        items = ", ".join(
            f"{c.family} {c.action} {c.write_units or c.read_units:g}" for c in request.charges
        )
        lines.append(f"        {request.operation}{'' if request.ok else ' (refused)'}: {items}")
    return lines


def report(mode: str, moto: Any, meter: WireMeter, detail: bool) -> None:
    print(f"\n== ownership {mode} ==")
    runs = {
        "between (no steps)": between(whole_run(moto, mode, 0, meter)),
        f"default run ({STEPS} steps of {RESULT_BYTES} B)": between(
            whole_run(moto, mode, STEPS, meter)
        ),
    }
    hinted = {
        title: between(whole_run(moto, mode, steps, meter, hinted=True), hinted=True)
        for title, steps in zip(runs, (0, STEPS), strict=True)
    }
    for title, parts in runs.items():
        print(f"\n{title}")
        through_hint = hinted[title]
        rows = [
            *parts.items(),
            ("whole run", total(parts)),
            ("fired sleep (hint)", through_hint["fired sleep"]),
            ("whole run (hint)", total(through_hint)),
        ]
        for name, phase in rows:
            print(figures(name, phase))
            if detail or name != "idle pass":
                for line in breakdown(phase):
                    print(line)
            if detail and name in (
                "start",
                "fired sleep",
                "signal to the end",
                "idle pass",
                "fired sleep (hint)",
            ):
                for line in requests(phase):
                    print(line)
    bare, stepped = (total(parts) for parts in runs.values())
    steps = Phase("its steps", stepped.wire - bare.wire, stepped.adapter - bare.adapter)
    print(f"\nthe default run's {STEPS} steps (default run minus the run without steps)")
    print(figures("its steps", steps))
    for line in breakdown(steps):
        print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--modes", default="workflow-lease,none")
    parser.add_argument(
        "--detail", action="store_true", help="also each request of a start, a signal, a pass"
    )
    args = parser.parse_args(argv)
    logging.getLogger("weft_serverless").setLevel(logging.ERROR)
    with moto_dynamodb() as moto:
        meter = WireMeter()
        meter.attach(moto.client)
        for mode in args.modes.split(","):
            report(mode, moto, meter, args.detail)
        if meter.priced_updates:
            print(f"\n{meter.priced_updates} UpdateItem requests billed by the old item alone")
        print(f"\ncontrol-plane requests (not billed): {len(meter.control)}")


if __name__ == "__main__":
    main()
