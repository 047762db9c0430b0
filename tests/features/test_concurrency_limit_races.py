"""Concurrency limits under races: many threads, each with its own engine on one store.

Every thread starts runs of one key at the same time; the slot records are taken by
conditional batches, so however the starts interleave, exactly ``max`` land (``reject``) or
``max`` run while the rest wait queued, and as runs end while several engines' maintenance
passes admit queued ones, the running count never exceeds ``max`` and every run finishes.
Run on every backend (DynamoDB both in-process and over moto's HTTP server, where the
threads' requests really overlap), with and without workflow-lease fencing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from feature_support import Opener

from weft_serverless import (
    Concurrency,
    Engine,
    WorkflowConcurrencyLimitExceededError,
    WorkflowDefinition,
    workflow,
)
from weft_serverless.codec import decode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage
from weft_serverless.testing import VirtualClock

THREADS = 6
PER_THREAD = 2
MAX = 2
WAIT = 120.0  # a bound on joining threads that always finish; never reached

# Under workflow-lease, engines take over each other's claims as the clock jumps: expected.
pytestmark = [
    pytest.mark.filterwarnings("ignore::weft_serverless.errors.WorkflowClaimLost"),
    pytest.mark.filterwarnings("ignore::weft_serverless.errors.WorkflowWakeDiscarded"),
]


def _sync(ctx: Any, input: dict[str, Any]) -> Any:
    return (yield ctx.wait_for_signal("go"))


def _workflows(on_limit: str) -> dict[str, WorkflowDefinition]:
    limit = Concurrency(max=MAX, key=lambda i: i["account"], on_limit=on_limit)  # type: ignore[arg-type]
    return {"sync": workflow("sync", concurrency=limit).execute(_sync)}


def _engines(
    storage_factory: Opener, on_limit: str, ownership: str, clock: VirtualClock
) -> list[Engine]:
    options: dict[str, Any] = {"ownership": ownership} if ownership != "none" else {}
    return [
        Engine.create(
            storage_factory(),
            _workflows(on_limit),
            background_tasks="manual",
            clock=clock,
            max_clock_skew=float("inf"),
            engine_id=f"e{n}",
            **options,
        )
        for n in range(THREADS)
    ]


def _in_threads(work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors


def _held(storage: Storage) -> list[str]:
    partition = keys.concurrency_partition("sync", "a")
    return sorted(decode(v)["id"] for _, v in storage.scan(partition, keys.SLOT_PREFIX))


def _statuses(engine: Engine, ids: list[str]) -> dict[str, str]:
    return {i: engine.describe(i).status for i in ids}


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_racing_starts_never_exceed_max_under_reject(
    storage_factory: Opener, ownership: str
) -> None:
    engines = _engines(storage_factory, "reject", ownership, VirtualClock())
    started: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        for k in range(PER_THREAD):
            run_id = f"r{n}-{k}"
            try:
                engines[n].start("sync", {"account": "a"}, id=run_id)
                with lock:
                    started.append(run_id)
            except WorkflowConcurrencyLimitExceededError:
                with lock:
                    refused.append(run_id)

    _in_threads(work)
    assert len(started) == MAX
    assert len(refused) == THREADS * PER_THREAD - MAX
    assert _held(storage_factory()) == sorted(started)
    assert set(_statuses(engines[0], started).values()) == {"running"}


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
def test_racing_starts_ends_and_admissions_under_queue_keep_max_and_finish_all(
    storage_factory: Opener, ownership: str
) -> None:
    clock = VirtualClock()
    engines = _engines(storage_factory, "queue", ownership, clock)
    ids = [f"q{n}-{k}" for n in range(THREADS) for k in range(PER_THREAD)]

    def start(n: int) -> None:
        for k in range(PER_THREAD):
            engines[n].start("sync", {"account": "a"}, id=f"q{n}-{k}")

    _in_threads(start)
    observer = engines[0]
    store = storage_factory()
    statuses = _statuses(observer, ids)
    assert sorted(statuses.values()).count("running") == MAX
    assert sorted(statuses.values()).count("pending") == len(ids) - MAX

    for _ in range(4 * len(ids)):
        running = [i for i, s in _statuses(observer, ids).items() if s == "running"]
        assert len(running) <= MAX
        assert sorted(running) == _held(store)
        if all(s == "completed" for s in _statuses(observer, ids).values()):
            break

        def step(n: int, running: list[str] = running) -> None:
            # Half the threads end what runs (each signal once), the others run maintenance.
            if n % 2 == 0:
                for run_id in running[n // 2 :: THREADS // 2]:
                    engines[n].signal(run_id, "go", n, signal_id=f"go-{run_id}")
            else:
                engines[n].run_maintenance()

        _in_threads(step)
        clock.advance(61.0)  # past a wake-up's grace: a drive that lost a race is retried
    assert set(_statuses(observer, ids).values()) == {"completed"}
    assert _held(store) == []
    partition = keys.concurrency_partition("sync", "a")
    assert list(store.scan(partition)) == []
