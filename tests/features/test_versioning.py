"""Versioning: a run keeps the version it started on; ``ctx.get_version`` pins code branches.

Rules pinned here: recovering a run under a definition of another version fails that run only
(``VersionMismatchError``), unless the definition lists the run's version in
``compatible_versions``; ``get_version(change_id, min, max)`` takes no step slot, gives new
runs ``max`` and runs that had already passed that point before the change ``min``, and the
value a run got is stored and kept across crashes (one outside the code's range fails at the
yield with ``VersionMismatchError``).
"""

from __future__ import annotations

from typing import Any

import pytest
from feature_support import (
    Calls,
    Opener,
    crashable_engine,
    expect_crash,
    make_engine,
    op_sigs,
    puts_prefix,
    recover_fresh,
    sorts_with,
)

from weft_serverless import InvalidArgumentError, WorkflowDefinition, workflow
from weft_serverless.storage import keys

WF = "wf-ship"


def _ship_v1(ctx: Any, order: str) -> Any:
    label = yield ctx.run("label", order)
    confirmation = yield ctx.wait_for_signal("picked")
    return ["v1", label, confirmation]


def _ship_v2(ctx: Any, order: str) -> Any:
    label = yield ctx.run("label", order)
    version = yield ctx.get_version("notify-before-pick", 1, 2)
    if version == 1:
        confirmation = yield ctx.wait_for_signal("picked")
        return ["old-branch", label, confirmation]
    notice = yield ctx.run("notify", order)
    confirmation = yield ctx.wait_for_signal("picked")
    return ["new-branch", label, notice, confirmation]


def _definitions(
    calls: Calls,
    body: Any,
    version: str = "1",
    compatible: tuple[str, ...] = (),
) -> dict[str, WorkflowDefinition]:
    builder = workflow("ship", version, compatible_versions=compatible).activities(
        label=calls.fn("label"), notify=calls.fn("notify")
    )
    return {"ship": builder.execute(body)}


def test_a_run_keeps_its_version_across_a_restart(storage_factory: Opener) -> None:
    """Normal path: the run records its version and is recovered by the same version."""
    calls = Calls()
    te = make_engine(storage_factory, _definitions(calls, _ship_v1, "1"))
    te.start("ship", "o1", id=WF)
    recover_fresh(te, storage_factory)
    te.signal(WF, "picked", "ok")
    description = te.describe(WF)
    assert description.version == "1"
    assert description.result == ["v1", "o1", "ok"]


def test_recovering_under_another_version_fails_only_that_run(storage_factory: Opener) -> None:
    """A redeploy with version 2 fails the version-1 run with ``VersionMismatchError``; a run
    of another workflow recovered by the same engine, and a run started on version 2, are
    unaffected."""

    def memo(ctx: Any, _: Any) -> Any:
        return (yield ctx.wait_for_signal("text"))

    calls = Calls()
    other = {"memo": workflow("memo").execute(memo)}
    te = make_engine(storage_factory, {**_definitions(calls, _ship_v1, "1"), **other})
    te.start("ship", "o1", id=WF)
    te.start("memo", id="wf-memo")
    recover_fresh(te, storage_factory, {**_definitions(calls, _ship_v1, "2"), **other})
    description = te.describe(WF)
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "VersionMismatchError"
    te.signal("wf-memo", "text", "hi")
    assert te.describe("wf-memo").result == "hi"
    te.start("ship", "o2", id="wf-new")
    te.signal("wf-new", "picked", "ok")
    assert te.describe("wf-new").version == "2"
    assert te.describe("wf-new").result == ["v1", "o2", "ok"]


def test_compatible_versions_let_the_run_continue(storage_factory: Opener) -> None:
    """Declaring the run's version in ``compatible_versions`` lets version 2 resume it."""
    calls = Calls()
    te = make_engine(storage_factory, _definitions(calls, _ship_v1, "1"))
    te.start("ship", "o1", id=WF)
    recover_fresh(te, storage_factory, _definitions(calls, _ship_v1, "2", ("1",)))
    te.signal(WF, "picked", "ok")
    assert te.describe(WF).result == ["v1", "o1", "ok"]
    assert te.describe(WF).version == "1"


def test_new_runs_get_max_and_take_no_step_slot(storage_factory: Opener) -> None:
    """A new run gets ``max_supported``, stored as a version record, and ``get_version``
    leaves the step sequence contiguous (it is not a step)."""
    calls = Calls()
    te = make_engine(storage_factory, _definitions(calls, _ship_v2))
    te.start("ship", "o1", id=WF)
    te.signal(WF, "picked", "ok")
    assert te.describe(WF).result == ["new-branch", "o1", "o1", "ok"]
    assert op_sigs(te.storage, WF) == ["run:label", "run:notify", "signal:picked"]
    assert len(sorts_with(te.storage, WF, keys.VERSION_PREFIX)) == 1


def test_a_run_parked_past_the_change_takes_the_old_branch(storage_factory: Opener) -> None:
    """v1 code parks a run at the wait; the redeploy inserts ``get_version`` just before that
    wait. The run had passed that point, so it gets ``min_supported``: it keeps its history,
    runs nothing new, and finishes on the old branch."""
    calls = Calls()
    te = make_engine(storage_factory, _definitions(calls, _ship_v1))
    te.start("ship", "o1", id=WF)
    recover_fresh(te, storage_factory, _definitions(calls, _ship_v2))
    te.signal(WF, "picked", "ok")
    assert te.describe(WF).result == ["old-branch", "o1", "ok"]
    assert calls.names() == ["label"]


def test_a_run_that_passed_the_change_with_history_takes_the_old_branch(
    storage_factory: Opener,
) -> None:
    """A run whose recorded steps extend past the insertion point replays them through the
    inserted ``get_version`` (no nondeterminism: it takes no slot) and takes the old branch."""

    def v1(ctx: Any, order: str) -> Any:
        label = yield ctx.run("label", order)
        confirmation = yield ctx.wait_for_signal("picked")
        yield ctx.wait_for_signal("closed")
        return ["v1", label, confirmation]

    def v2(ctx: Any, order: str) -> Any:
        label = yield ctx.run("label", order)
        version = yield ctx.get_version("notify-before-pick", 1, 2)
        if version == 2:
            yield ctx.run("notify", order)
        confirmation = yield ctx.wait_for_signal("picked")
        yield ctx.wait_for_signal("closed")
        return [f"branch-{version}", label, confirmation]

    calls = Calls()
    te = make_engine(storage_factory, _definitions(calls, v1))
    te.start("ship", "o1", id=WF)
    te.signal(WF, "picked", "ok")
    recover_fresh(te, storage_factory, _definitions(calls, v2))
    te.signal(WF, "closed")
    assert te.describe(WF).result == ["branch-1", "o1", "ok"]
    assert calls.names() == ["label"]


def test_a_run_parked_before_the_change_gets_max_when_it_reaches_it(
    storage_factory: Opener,
) -> None:
    """A run parked before the insertion point has not passed it: when it gets there it is
    a new decision and takes ``max_supported``."""

    def v1(ctx: Any, order: str) -> Any:
        yield ctx.wait_for_signal("go")
        label = yield ctx.run("label", order)
        confirmation = yield ctx.wait_for_signal("picked")
        return ["v1", label, confirmation]

    def v2(ctx: Any, order: str) -> Any:
        yield ctx.wait_for_signal("go")
        label = yield ctx.run("label", order)
        version = yield ctx.get_version("notify-before-pick", 1, 2)
        confirmation = yield ctx.wait_for_signal("picked")
        return [f"branch-{version}", label, confirmation]

    calls = Calls()
    te = make_engine(storage_factory, _definitions(calls, v1))
    te.start("ship", "o1", id=WF)
    recover_fresh(te, storage_factory, _definitions(calls, v2))
    te.signal(WF, "go")
    te.signal(WF, "picked", "ok")
    assert te.describe(WF).result == ["branch-2", "o1", "ok"]


def test_a_pinned_version_persists_across_crashes(storage_factory: Opener) -> None:
    """Crash right after the version is pinned: fresh engines, now running code whose range
    is wider (1..3), keep the pinned 2; code that no longer supports a run's pinned value
    fails that run at the yield."""
    calls = Calls()
    te, crashing = crashable_engine(storage_factory, _definitions(calls, _ship_v2))
    crashing.arm(puts_prefix(keys.VERSION_PREFIX, WF), after=True)
    with expect_crash():
        te.start("ship", "o1", id=WF)

    def wider(ctx: Any, order: str) -> Any:
        label = yield ctx.run("label", order)
        version = yield ctx.get_version("notify-before-pick", 1, 3)
        confirmation = yield ctx.wait_for_signal("picked")
        return [version, label, confirmation]

    recover_fresh(te, storage_factory, _definitions(calls, wider))
    recover_fresh(te, storage_factory, _definitions(calls, wider))
    te.signal(WF, "picked", "ok")
    assert te.describe(WF).result == [2, "o1", "ok"]

    def dropped(ctx: Any, order: str) -> Any:
        yield ctx.run("label", order)
        yield ctx.get_version("notify-before-pick", 1, 1)
        return "unreachable"

    te.start("ship", "o2", id="wf-pinned")  # pins 3 under the wider code
    recover_fresh(te, storage_factory, _definitions(calls, dropped))
    te.run_maintenance()
    description = te.describe("wf-pinned")
    assert description.status == "failed"
    assert description.error is not None
    assert description.error["type"] == "VersionMismatchError"


@pytest.mark.parametrize(
    "args",
    [("", 1, 2), ("change", 3, 1), ("change", "1", 2)],
    ids=["empty-id", "min-above-max", "not-int"],
)
def test_bad_get_version_arguments_fail_at_the_call(
    storage_factory: Opener, args: tuple[Any, ...]
) -> None:
    """Bad change ids and ranges are ``InvalidArgumentError`` where they are written."""

    def body(ctx: Any, _: Any) -> Any:
        return (yield ctx.get_version(*args))

    te = make_engine(storage_factory, {"bad": workflow("bad").execute(body)})
    te.start("bad", id=WF)
    error = te.describe(WF).error
    assert error is not None
    assert error["type"] == InvalidArgumentError.__name__
