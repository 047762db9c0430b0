"""Queries: read-only answers from a workflow's current state, on any engine.

Rules pinned here (docs/decisions/0005-updates-and-queries.md): a query replays the stored
history read-only and calls the handler on the rebuilt state; it works on an engine that never
drove the workflow (a fresh process after a crash) and on finished runs; it never writes, never
runs an activity and never fires a timer that is due; an unknown name is ``UnknownQueryError``.
"""

from __future__ import annotations

from typing import Any

from feature_support import (
    Calls,
    Opener,
    WriteCount,
    crashable_engine,
    expect_crash,
    make_engine,
    puts_op,
    refused,
)

from weft_serverless import (
    CodecError,
    Engine,
    InvalidArgumentError,
    UnknownQueryError,
    WorkflowDefinition,
    WorkflowNotFoundError,
    workflow,
)
from weft_serverless.storage import keys
from weft_serverless.testing import TestEngine

WF = "wf-order"


def _order(ctx: Any, order: dict[str, Any]) -> Any:
    """An order moving through stages; ``stage`` and ``total`` queries expose its state."""
    state: dict[str, Any] = {"stage": "new", "notes": []}
    ctx.on_query("stage", lambda _: state["stage"])
    ctx.on_query("total", lambda tax: order["amount"] * (1 + (tax or 0)))
    ctx.on_query("odd", lambda _: object())
    state["reservation"] = yield ctx.run("reserve", order["sku"])
    state["stage"] = "reserved"
    note = yield ctx.wait_for_signal("note")
    state["notes"].append(note)
    state["stage"] = "noted"
    yield ctx.sleep("1h")
    state["stage"] = "slept"
    yield ctx.run("ship", order["sku"])
    state["stage"] = "shipped"
    return state["stage"]


def _workflows(calls: Calls) -> dict[str, WorkflowDefinition]:
    builder = workflow("order").activities(reserve=calls.fn("reserve"), ship=calls.fn("ship"))
    return {"order": builder.execute(_order)}


def _engine(storage_factory: Opener, calls: Calls) -> TestEngine:
    return make_engine(storage_factory, _workflows(calls))


def _cold_engine(te: TestEngine, storage_factory: Opener) -> Engine:
    """An engine that never drove anything: a fresh handle, no recovery pass."""
    return Engine.create(
        storage_factory(),
        te.workflows,
        background_tasks="manual",
        recover=False,
        clock=te.clock,
    )


def test_query_answers_from_current_state(storage_factory: Opener) -> None:
    """Normal path: the handler sees the state the run has built so far, with its argument."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("order", {"sku": "A1", "amount": 100}, id=WF)
    assert te.query(WF, "stage") == "reserved"
    assert te.query(WF, "total", 0.5) == 150
    te.signal(WF, "note", "fragile")
    assert te.query(WF, "stage") == "noted"


def test_query_on_a_cold_engine_after_a_crash_writes_nothing(storage_factory: Opener) -> None:
    """Crash right after a step's commit; an engine that holds nothing in memory answers from
    storage alone, and the query writes nothing, runs nothing and moves nothing on."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _workflows(calls))
    crashing.arm(puts_op(WF, 0), after=True)
    with expect_crash():
        te.start("order", {"sku": "A1", "amount": 100}, id=WF)
    cold = _cold_engine(te, storage_factory)
    storage = cold.runtime.storage
    writes = WriteCount.of(storage)
    assert cold.query(WF, "stage") == "reserved"
    assert cold.query(WF, "total") == 100
    assert WriteCount.of(storage) == writes
    assert calls.names() == ["reserve"]
    assert cold.describe(WF).status == "running"


def test_query_does_not_fire_due_work(storage_factory: Opener) -> None:
    """A sleep that is due but not yet fired stays unfired: the query answers from the state
    before it, and neither the timer nor the next activity runs."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("order", {"sku": "A1", "amount": 100}, id=WF)
    te.signal(WF, "note", "fragile")
    te.clock.advance(7200)  # the sleep is due; no maintenance pass has fired it
    writes = WriteCount.of(te.storage)
    assert te.query(WF, "stage") == "noted"
    assert WriteCount.of(te.storage) == writes
    assert calls.count("ship") == 0
    te.run_maintenance()
    assert te.query(WF, "stage") == "shipped"


def test_query_works_on_finished_runs(storage_factory: Opener) -> None:
    """A completed run answers from its final state, also on a fresh engine; a cancelled one
    answers from the state it had reached."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("order", {"sku": "A1", "amount": 100}, id=WF)
    te.signal(WF, "note", "fragile")
    te.advance(3600)
    assert te.describe(WF).status == "completed"
    assert te.query(WF, "stage") == "shipped"
    te.start("order", {"sku": "B2", "amount": 5}, id="wf-cancelled")
    te.cancel("wf-cancelled")
    cold = _cold_engine(te, storage_factory)
    assert cold.query(WF, "stage") == "shipped"
    assert cold.query("wf-cancelled", "stage") == "reserved"


BAD_QUERIES: list[tuple[str, str, str, Any, type[Exception]]] = [
    ("unknown-name", WF, "nope", None, UnknownQueryError),
    ("empty-name", WF, "", None, InvalidArgumentError),
    ("unknown-workflow", "nobody", "stage", None, WorkflowNotFoundError),
    ("unencodable-arg", WF, "total", object(), CodecError),
    ("unencodable-answer", WF, "odd", None, CodecError),
]


def test_bad_queries_fail_without_writing(storage_factory: Opener) -> None:
    """Unknown names and workflows, and values the codec cannot carry, are typed errors; the
    store is not touched."""
    calls = Calls()
    te = _engine(storage_factory, calls)
    te.start("order", {"sku": "A1", "amount": 100}, id=WF)
    writes = WriteCount.of(te.storage)
    for case, workflow_id, name, arg, error in BAD_QUERIES:
        with refused(case, error):
            te.query(workflow_id, name, arg)
    assert WriteCount.of(te.storage) == writes


def test_a_query_leaves_the_parked_run_where_it_is(storage_factory: Opener) -> None:
    """The query's replay runs the code on a copy of its own: the generator the engine kept
    parked is still the one a signal resumes (the code is entered once more, by the query)."""
    entries: list[int] = []

    def parked(ctx: Any, _: Any) -> Any:
        entries.append(1)
        got: dict[str, Any] = {"note": None}
        ctx.on_query("note", lambda _: got["note"])
        got["note"] = yield ctx.wait_for_signal("note")
        yield ctx.wait_for_signal("done")
        return got["note"]

    te = make_engine(storage_factory, {"parked": workflow("parked").execute(parked)})
    te.start("parked", None, id=WF)
    te.signal(WF, "note", "fragile")
    assert len(entries) == 1
    writes = WriteCount.of(te.storage)
    assert te.query(WF, "note") == "fragile"
    assert WriteCount.of(te.storage) == writes
    assert len(entries) == 2
    te.signal(WF, "done", None)
    assert te.describe(WF).status == "completed"
    assert len(entries) == 2  # resumed warm: no replay after the query


def test_a_query_past_an_unpinned_change_pins_nothing(storage_factory: Opener) -> None:
    """``get_version`` reached for the first time in a query's replay answers ``max`` as a
    drive would pin it, but stores nothing; the drive that reaches it later pins it."""

    def before(ctx: Any, _: Any) -> Any:
        yield ctx.wait_for_signal("go")
        return "before"

    def after(ctx: Any, _: Any) -> Any:
        version = yield ctx.get_version("greeting", 1, 2)
        ctx.on_query("version", lambda _: version)
        yield ctx.wait_for_signal("go")
        return version

    te = make_engine(storage_factory, {"change": workflow("change").execute(before)})
    te.start("change", None, id=WF)
    changed = Engine.create(
        te.storage,
        {"change": workflow("change").execute(after)},
        background_tasks="manual",
        recover=False,
        clock=te.clock,
    )
    writes = WriteCount.of(te.storage)
    assert changed.query(WF, "version") == 2
    assert WriteCount.of(te.storage) == writes
    assert te.storage.get(keys.version_key(WF, "greeting")) is None
