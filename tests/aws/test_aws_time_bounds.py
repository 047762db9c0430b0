"""Every number and duration the HTTP API and the workflow context accept, under one property:
any value is either used or refused with a typed error at the call, never a 500 and never a
run left ``running`` by a value it could not store.

Durations and instants are read by one check each (``weft_serverless.time_values``), bounded
to what the 16-digit millisecond keys hold, so ``1e308`` (which became infinity on its way to
a key) is an ``InvalidArgumentError`` naming its field: a 400 with nothing written over HTTP,
the run failed at the yield inside a workflow.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import aws_flows
from aws_support import Api, FakeMonotonic, Reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft_serverless import (
    Engine,
    InvalidArgumentError,
    MemoryStorage,
    RetryPolicy,
    WorkflowContext,
    workflow,
)
from weft_serverless.aws import make_api_handler
from weft_serverless.storage import keys
from weft_serverless.testing import VirtualClock
from weft_serverless.time_values import KEY_LIMIT, MAX_DURATION, MAX_INSTANT

UNITS = ("ms", "s", "m", "h", "d")
HUGE = (1e308, -1e308, 10**400, 1e16, MAX_DURATION, MAX_INSTANT, 0, -0.0, 5e-324)
NUMBERS = st.one_of(
    st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.builds(
        lambda n, unit: f"{n}{unit}",
        st.integers(min_value=0, max_value=10**16),
        st.sampled_from(UNITS),
    ),
    st.sampled_from(
        ["5m", "1e308s", "tomorrow", "", "2030-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00"]
    ),
    st.booleans(),
)
SCHEDULE = {"schedule_id": "nightly", "workflow_type": "greeter", "every": 3600}


# -- the HTTP API ------------------------------------------------------------------------------


def _start(field: str) -> Callable[[Api, Any], Reply]:
    return lambda api, value: api("POST", "/workflows", {"workflow_type": "greeter", field: value})


def _schedule(field: str) -> Callable[[Api, Any], Reply]:
    def send(api: Api, value: Any) -> Reply:
        body = {**SCHEDULE, "schedule_id": "other", field: value}
        if field == "every":
            body.pop("every")
        return api("POST", "/schedules", {**body, field: value})

    return send


def _query(path: str, field: str) -> Callable[[Api, Any], Reply]:
    return lambda api, value: api("GET", path, query={field: str(value)})


def _bulk(field: str) -> Callable[[Api, Any], Reply]:
    def send(api: Api, value: Any) -> Reply:
        if field == "page_size":
            return api("POST", "/bulk/cancel", {"dry_run": True, "page_size": value})
        return api("POST", "/bulk/cancel", {"dry_run": True, "filter": {field: value}})

    return send


def _backfill(field: str) -> Callable[[Api, Any], Reply]:
    def send(api: Api, value: Any) -> Reply:
        body = {"start": 0, "end": 0, field: value}
        return api("POST", "/schedules/nightly/backfill", body)

    return send


API_ENTRIES: dict[str, Callable[[Api, Any], Reply]] = {
    **{f"start {f}": _start(f) for f in ("execution_timeout", "start_at", "start_after")},
    "start wait_seconds": _start("wait_seconds"),
    **{
        f"schedule {f}": _schedule(f)
        for f in ("every", "catchup_window", "jitter", "start_at", "end_at")
    },
    **{f"backfill {f}": _backfill(f) for f in ("start", "end")},
    **{f"list {f}": _query("/workflows", f) for f in ("started_after", "started_before", "limit")},
    "count started_after": _query("/workflow-counts", "started_after"),
    "events limit": _query("/workflows/parked/events", "limit"),
    "result wait_seconds": _query("/workflows/parked/result", "wait_seconds"),
    **{f"bulk {f}": _bulk(f) for f in ("started_after", "started_before", "page_size")},
}


# -- the workflow context ----------------------------------------------------------------------


GIVEN: dict[str, tuple[str, Any]] = {}
"""Run id -> (the context call, its value): the value stays out of the run's input, which the
codec would refuse for a 400-digit int before the workflow could ever see it."""


def _uses(ctx: WorkflowContext, _: Any) -> Generator[Any, Any, str]:
    kind, value = GIVEN[ctx.workflow_id]
    if kind == "sleep":
        yield ctx.sleep(value)
    elif kind == "signal timeout":
        yield ctx.wait_for_signal("go", timeout=value)
    elif kind == "wait_until timeout":
        yield ctx.wait_until(lambda: False, timeout=value)
    elif kind in ("timeout", "heartbeat_timeout", "schedule_to_close"):
        yield ctx.run("quick", 1, **{kind: value})
    else:  # a retry policy field
        yield ctx.run("quick", 1, retry=RetryPolicy(**{kind: value}))
    return "done"


CONTEXT_ENTRIES = (
    "sleep",
    "signal timeout",
    "wait_until timeout",
    "timeout",
    "heartbeat_timeout",
    "schedule_to_close",
    "max_attempts",
    "initial_backoff",
    "backoff_multiplier",
    "max_backoff",
)
USES = {"uses": workflow("uses").activities(quick=lambda x: x).execute(_uses)}


@dataclass
class World:
    """One store, one engine behind the API handler, the objects id-taking calls need."""

    engine: Engine
    api: Api

    @classmethod
    def make(cls) -> World:
        clock, monotonic = VirtualClock(), FakeMonotonic()
        engine = Engine.create(
            MemoryStorage(), {**aws_flows.workflows, **USES}, clock=clock, background_tasks="manual"
        )
        handler = make_api_handler(
            engine_factory=lambda: engine, sleep=monotonic.sleep, monotonic=monotonic
        )
        world = cls(engine, Api(handler, monotonic))
        engine.start("approval", id="parked")
        engine.schedule(**SCHEDULE)
        return world

    def items(self) -> tuple[int, int]:
        stats = self.engine.runtime.storage.stats
        return stats.items_written, stats.items_deleted


def _timer_dues(engine: Engine) -> list[float]:
    storage = engine.runtime.storage
    return [
        keys.timer_due_of(sort)
        for shard in range(keys.TIMER_SHARDS)
        for sort, _ in storage.scan(keys.timer_partition(shard))
    ]


FAILURES = ("InvalidArgumentError", "ActivityTimedOutError")
ENTRIES = [("api", name) for name in API_ENTRIES] + [("context", k) for k in CONTEXT_ENTRIES]


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(entry=st.sampled_from(ENTRIES), value=NUMBERS)
def test_every_number_the_api_or_a_workflow_takes_is_used_or_refused_at_the_call(
    entry: tuple[str, str], value: Any
) -> None:
    world = World.make()
    where, name = entry
    if where == "api":
        before = world.items()
        reply = API_ENTRIES[name](world.api, _jsonable(value))
        assert reply.status in (200, 201, 202, 400), (name, value, reply.body)
        if reply.status == 400:
            assert reply.body["field"], (name, value, reply.body)
            assert world.items() == before, (name, value, "a refused request wrote")
    else:
        GIVEN["uses"] = (name, value)
        handle = world.engine.start("uses", id="uses")  # never raises
        described = handle.describe()
        assert described.status in ("completed", "running", "failed"), (name, value)
        if described.status == "failed":  # refused at the call, or a tiny timeout ran out
            assert described.error is not None
            assert described.error["type"] in FAILURES, (name, value, described.error)
    assert all(0 <= due < KEY_LIMIT for due in _timer_dues(world.engine)), (name, value)


def _jsonable(value: Any) -> Any:
    """What a JSON body can carry: non-finite floats have no JSON spelling, send them as text."""
    if isinstance(value, float) and (value != value or abs(value) == float("inf")):
        return str(value)
    return value


# -- the bounds, and what they guard ----------------------------------------------------------


def test_the_latest_instant_plus_many_durations_still_sorts_as_a_key() -> None:
    """The bounds' reason: a due time is 16 digits of milliseconds in its key. The latest
    instant a caller may name, plus thirty of the longest durations, still fits."""
    due = MAX_INSTANT + 30 * MAX_DURATION
    assert due < KEY_LIMIT
    sort = keys.timer_key(keys.DEFAULT_SHARDS, due, "wf", "s00000001").sort
    assert len(sort.split("#")[0]) == 16
    assert (
        keys.timer_key(keys.DEFAULT_SHARDS, 0, "wf", "x").sort
        < keys.timer_key(keys.DEFAULT_SHARDS, MAX_INSTANT, "wf", "x").sort
        < sort
    )
    assert datetime.datetime.fromtimestamp(MAX_INSTANT, datetime.UTC).year == 9999


def test_a_huge_sleep_fails_the_run_at_its_yield_and_leaves_no_timer() -> None:
    world = World.make()
    dues = _timer_dues(world.engine)
    GIVEN["sleeper"] = ("sleep", 1e308)
    handle = world.engine.start("uses", id="sleeper")
    described = handle.describe()
    assert described.status == "failed"
    assert described.error is not None and described.error["type"] == "InvalidArgumentError"
    assert "sleep duration" in described.error["message"]
    assert _timer_dues(world.engine) == dues


def test_a_value_over_a_bound_is_a_400_naming_its_field_and_writes_nothing() -> None:
    world = World.make()
    for name, send in API_ENTRIES.items():
        before = world.items()
        reply = send(world.api, 1e308)
        assert reply.status == 400, (name, reply.body)
        assert reply.body["code"] in (
            "InvalidArgumentError",
            "InvalidScheduleError",
            "InvalidFilterError",
        ), (name, reply.body)
        assert reply.body["field"] == name.split(" ")[1], (name, reply.body)
        assert world.items() == before, name
    for name in CONTEXT_ENTRIES:
        if name in ("max_attempts", "backoff_multiplier"):
            continue  # a count and a factor, not durations: checked in the property above
        GIVEN[f"ctx-{name}"] = (name, 1e308)
        with_value = world.engine.start("uses", id=f"ctx-{name}")
        error = with_value.describe().error
        assert error is not None and error["type"] == InvalidArgumentError.__name__, name
        assert name.split(" ")[-1] in error["message"], (name, error)


def test_a_retry_policy_backs_off_without_overflow_after_many_attempts() -> None:
    policy = RetryPolicy(max_attempts=10**6, backoff_multiplier=2, max_backoff="1h")
    assert policy.backoff(3) == 4.0
    assert policy.backoff(5000) == 3600.0  # 2.0 ** 4999 raises OverflowError by itself
    assert json.dumps(policy.backoff(10**6)) == "3600.0"
