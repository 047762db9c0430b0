"""The simulation harness in CI: a fixed range of seeded schedules must hold every invariant.

``simulate.CI_SCHEDULES`` is the one knob: how many schedules a CI run makes, split between
backends by ``simulate.CI_SHARES`` (memory and SQLite for most, a handful on DynamoDB over
moto's HTTP server).
Each seed range is fixed, so a failure here is a failure of that seed anywhere; its message
is the harness's shrunk reproduction, a one-line ``--replay`` command. See docs/simulation.md.

The other tests pin the harness itself: a seed replays exactly, a planted defect is found,
shrunk, and reproduced by the printed line, and every snippet of the mutation table
(``mutation_table`` and ``mutation_regressions``) still names one code site.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from weft_serverless.storage import keys
from weft_serverless.testing import simulate
from weft_serverless.testing.mutation_table import Mutation
from weft_serverless.testing.mutations import MUTATIONS, snippet_count
from weft_serverless.testing.sim_records import Scenario

CHUNK = 100  # seeds per test item, so a failure names a small range
STORAGE_MARK = {"memory": "memory", "sqlite": "sqlite", "dynamodb": "dynamodb-http"}


def _chunks() -> Iterator[Any]:
    for backend in simulate.CI_SHARES:
        whole = simulate.ci_seeds(backend)
        for start in range(whole.start, whole.stop, CHUNK):
            seeds = range(start, min(start + CHUNK, whole.stop))
            yield pytest.param(
                backend,
                seeds,
                id=f"{backend}-{seeds.start}-{seeds.stop - 1}",
                marks=pytest.mark.storage(STORAGE_MARK[backend]),
            )


@pytest.fixture
def endpoint(request: pytest.FixtureRequest, backend: str) -> str | None:
    """moto's HTTP server of the test session, for the DynamoDB schedules."""
    if backend != "dynamodb":
        return None
    from dynamodb_support import moto_environment

    return moto_environment(request.config).start_server()


@pytest.mark.parametrize(("backend", "seeds"), list(_chunks()))
def test_seeded_schedules_hold_every_invariant(
    backend: str, seeds: range, endpoint: str | None
) -> None:
    """Every schedule of the CI range reaches quiescence with no invariant broken."""
    printed: list[str] = []
    failures, ran = simulate.run_seeds(
        seeds,
        out=printed.append,
        shrink_budget=30.0,
        endpoint=endpoint,
        steps=simulate.CI_STEPS[backend],
        backend=backend,
    )
    assert ran == len(seeds)
    assert not failures, "\n\n".join(printed)


def test_a_seed_replays_exactly() -> None:
    """One seed, run twice, makes the same writes and fires the same faults: a printed seed
    is a reproduction."""
    scenario = simulate.generate(7, steps=60)
    first, second = simulate.run_scenario(scenario), simulate.run_scenario(scenario)
    assert first.writes == second.writes
    assert first.faults_fired == second.faults_fired
    assert first.faults_fired, "the seed should exercise some faults"
    assert first.violations == second.violations == []


def test_a_seed_with_hints_and_several_workers_replays_exactly() -> None:
    """Hints are taken from the world's queue by a drawn index and shares by a drawn worker:
    a seed that delivers hints and runs shares still makes the same writes twice."""
    seed = next(
        seed
        for seed in range(100)
        if (drawn := simulate.generate(seed, steps=60)).workers > 1
        and drawn.hint_horizon > 0
        and {"hint", "maintain-share"} <= {action[0] for action in drawn.actions}
    )
    scenario = simulate.generate(seed, steps=60)
    first, second = simulate.run_scenario(scenario), simulate.run_scenario(scenario)
    assert first.writes == second.writes
    assert first.violations == second.violations == []


def test_a_replay_line_printed_before_hints_and_shares_still_decodes() -> None:
    """A spec without ``workers`` and ``hint_horizon`` runs as it did: one worker, no hints."""
    scenario = simulate.generate(5, steps=10)
    old = {
        k: v
        for k, v in dataclasses.asdict(scenario).items()
        if k not in ("workers", "hint_horizon")
    }
    spec = base64.urlsafe_b64encode(zlib.compress(json.dumps(old).encode())).decode()
    decoded = simulate.decode_scenario(spec)
    assert (decoded.workers, decoded.hint_horizon) == (1, 0.0)
    assert decoded.actions == scenario.actions


def test_a_scenario_survives_its_replay_encoding() -> None:
    scenario = simulate.generate(11, steps=30, engines=2, backend="sqlite")
    assert simulate.decode_scenario(simulate.encode_scenario(scenario)) == scenario


def test_a_planted_defect_is_found_shrunk_and_reproduced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sleep timer written a day late (a lost wake-up) leaves a run stuck on its sleep, or,
    when something else woke the run, leaves the sleep's timer behind the finished run: the
    harness finds it, shrinks the schedule, and the printed replay line fails the same way."""
    real_timer_key = keys.timer_key

    def late_timer(shards: keys.ShardCounts, due: float, workflow_id: str, tag: str) -> keys.Key:
        return real_timer_key(
            shards, due + 86_400 if tag.startswith("s") else due, workflow_id, tag
        )

    monkeypatch.setattr(keys, "timer_key", late_timer)
    printed: list[str] = []
    failures, _ = simulate.run_seeds(
        range(0, 40), out=printed.append, shrink_budget=20.0, steps=30, faults=[]
    )
    assert failures, "a lost sleep wake-up must be found within 40 seeds"
    shrunk = failures[0]
    original = simulate.generate(shrunk.scenario.seed, steps=30, faults=[])
    assert len(shrunk.scenario.actions) < len(original.actions)
    assert any(
        ("[liveness]" in v and "(sleep)" in v)
        or ("[finished-runs-keep-no-timers]" in v and "sleep timer" in v)
        for v in shrunk.violations
    )
    line = printed[0].splitlines()[-1]
    assert line.startswith("  reproduce: python -m weft_serverless.testing.simulate --replay '")
    replayed = simulate.decode_scenario(line.split("'")[1])
    assert isinstance(replayed, Scenario)
    assert simulate.run_scenario(replayed).violations == shrunk.violations


def test_the_command_line_runs_seeds_and_replays(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate.main(["--seed", "3", "--seeds", "2", "--steps", "15"]) == 0
    assert "2 schedule(s) on memory, 0 failing" in capsys.readouterr().out
    spec = simulate.encode_scenario(simulate.generate(3, steps=15))
    assert simulate.main(["--replay", spec]) == 0
    assert "seed 3: ok" in capsys.readouterr().out


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_mutation_names_one_code_site(mutation: Mutation) -> None:
    """A refactor that moves or duplicates a mutated line must update the table: a snippet
    found nowhere (or twice) would silently disarm that mutation."""
    assert snippet_count(mutation) == 1, (
        f"{mutation.name}: {mutation.original!r} occurs {snippet_count(mutation)} times in "
        f"weft_serverless/{mutation.path}; point the entry at the code it means to break"
    )
    assert mutation.replacement != mutation.original


def test_the_mutation_table_covers_every_feature_of_the_workload() -> None:
    """The features the brief of the harness names each have a mutation (the loop itself
    runs on purpose, not in CI: ``python -m weft_serverless.testing.mutations``)."""
    features = " ".join(m.feature for m in MUTATIONS)
    for feature in (
        "branches together",
        "map",
        "nested composites",
        "schedule",
        "concurrency reject",
        "concurrency queue",
        "continue_as_new",
        "finalizers (cancel)",
        "finalizers (time-out)",
        "crash mid-teardown",
        "bulk operations",
        "upserts",
        "tag filters",
        "heartbeats",
        "store-wide lease",
        "children (two levels)",
        "updates racing cancels",
        "timer hints (early)",
        "timer hints (firing)",
        "timer hints (early delivery)",
        "maintenance shares",
        "retries (early)",
    ):
        assert feature in features, feature
