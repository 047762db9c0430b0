"""Under workflow-lease, a deposed owner's events never exist: its terminal batch, which would
carry the outbox item, is refused by the fence, so no engine ever publishes them."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

from ownership_support import Calls, Journal, Opener, caught, make_engines, of_category

from weft_serverless import Engine, workflow
from weft_serverless.errors import WorkflowClaimLost
from weft_serverless.storage import keys
from weft_serverless.testing import VirtualClock

Gen = Generator[Any, Any, Any]


class ListSink:
    """An ``EventSink`` that accepts everything and remembers it."""

    max_batch = 10
    max_bytes = 256 * 1024

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []

    def publish(self, events: Sequence[Mapping[str, Any]]) -> list[bool]:
        self.published += [dict(event) for event in events]
        return [True] * len(events)

    def size_of(self, event: Mapping[str, Any]) -> int:
        return 100


def test_the_terminal_event_of_a_deposed_owner_never_exists(storage_factory: Opener) -> None:
    clock, journal, calls, sink = VirtualClock(), Journal(), Calls(), ListSink()
    engines: dict[str, Engine] = {}
    cancelled: list[bool] = []

    def flow(ctx: Any, x: int) -> Gen:
        yield ctx.run("b", x)
        if not cancelled:
            cancelled.append(True)
            engines["e2"].cancel("w")  # another engine, before this owner's terminal commit
        return x

    flows = {"flow": workflow("flow").activities(b=calls.recorder("b")).execute(flow)}
    engines.update(
        make_engines(storage_factory, flows, ["e1", "e2"], clock, journal=journal, events=sink)
    )
    with caught() as seen:
        engines["e1"].start("flow", 1, id="w")
    assert of_category(seen, WorkflowClaimLost)  # e1's completion was refused
    assert engines["e1"].describe("w").status == "cancelled"
    store = storage_factory()
    items = [
        sort
        for shard in range(keys.OUTBOX_SHARDS)
        for sort, _ in store.scan(keys.outbox_partition(shard))
    ]
    assert len(items) == 1
    for name in ("e1", "e2"):
        engines[name].run_maintenance()
    assert [(e["workflow_id"], e["type"]) for e in sink.published] == [("w", "run.cancelled")]
