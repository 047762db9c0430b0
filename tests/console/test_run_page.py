"""The run page read through Flask's test client: header, timeline, events, teardown, folded
values and the live refresh, on the examples' engine and on a probe workflow that has every
part a run can show (retries with heartbeats, a concurrency key, search attributes, tags, an
owner under workflow-lease, a finalizer)."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from run_html import find, text, texts

from examples.approval import SAMPLE_INPUT as APPROVAL
from examples.batch import SAMPLE_INPUT as BATCH
from examples.order import SAMPLE_ORDER
from examples.workflows import workflows as example_workflows
from weft_serverless import (
    Concurrency,
    Engine,
    RetryPolicy,
    SQLiteStorage,
    WorkflowContext,
    current_activity,
    workflow,
)
from weft_serverless.console import timeline
from weft_serverless.console.app import Console, create_app
from weft_serverless.console.formatting import FOLD_CHARS, compact
from weft_serverless.testing import VirtualClock

MINUTE = 60.0


def html_of(client: FlaskClient, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, response.data[:400]
    return response.get_data(as_text=True)


def rows_of(html: str) -> list[str]:
    """Each timeline row's HTML, in order."""
    return re.findall(r'<tr class="step[^"]*" data-testid="step-row".*?</tr>', html, re.S)


def without_values(row: str) -> str:
    """A timeline row without its steps' input and output lines."""
    return re.sub(r'<div class="step-value".*?</div>', "", row, flags=re.S)


def text_of(fragment: str) -> str:
    """A fragment's visible text, tags dropped and whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", fragment).split()).replace(" :", ":")


# -- a probe workflow with every part --------------------------------------------------------


def _flaky(_: Any) -> None:
    current_activity().heartbeat({"page": 3})
    raise ConnectionError("upstream said 503")


def _undo(_: Any) -> None:
    raise RuntimeError("undo broke")


def _probe(ctx: WorkflowContext, request: dict[str, Any]) -> Generator[Any, Any, None]:
    ctx.on_cancel("undo", request)
    yield ctx.run("warm", request)
    yield ctx.run("flaky", request, retry=RetryPolicy(max_attempts=5, initial_backoff=30))


PROBE = {
    "probe": workflow(
        "probe",
        version="7",
        concurrency=Concurrency(max=2, key=lambda request: str(request["account"])),
        search_attributes={"customer": str},
    )
    .activities(warm=lambda _: 1, flaky=_flaky, undo=_undo)
    .execute(_probe)
}


@pytest.fixture
def probe(tmp_path: Path, clock: VirtualClock) -> Iterator[tuple[Engine, FlaskClient]]:
    """The probe run ``p1`` two failed attempts in, on a workflow-lease engine, and a client."""
    storage = SQLiteStorage(tmp_path / "probe.db")
    engine = Engine.create(
        storage,
        PROBE,
        clock=clock,
        background_tasks="manual",
        recover=False,
        max_parallel_activities=0,
        ownership="workflow-lease",
    )
    engine.start(
        "probe", {"account": "acme"}, id="p1", tags=["vip"], search_attributes={"customer": "acme"}
    )
    clock.advance(31)
    engine.run_maintenance()  # the second attempt fails too
    app = create_app(Console(engine, "probe", drives=True), config={"TESTING": True})
    yield engine, app.test_client()
    engine.close()
    storage.close()


# -- header ----------------------------------------------------------------------------------


def test_the_header_shows_the_run_its_owner_and_its_keys(
    probe: tuple[Engine, FlaskClient],
) -> None:
    engine, client = probe
    html = html_of(client, "/runs/p1")
    assert text(html, "run-id") == "p1"
    assert find(html, "run-status")[0].attrs["class"] == "badge status-running"
    assert text(html, "run-status") == "running"
    assert text(html, "run-type") == "probe version 7"
    assert text(html, "run-number") == "1"
    holder = engine.describe("p1").owner or {}
    assert text(html, "run-owner") == f"{holder['engine_id']}, claim expires in 30.0 s; epoch 1"
    assert text(html, "run-concurrency-key") == "acme"
    assert text(html, "run-search-attributes") == 'customer="acme"'
    assert text(html, "run-tags") == "vip"
    assert "2026-01-01 00:00:00" in html  # created, UTC
    assert "&#34;account&#34;: &#34;acme&#34;" in html  # the input, pretty


def test_a_child_links_its_parent_and_the_parent_links_its_children(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("batch", BATCH, id="b1")
    child = html_of(client, "/runs/b1-chunk-000")
    assert '<a class="mono" data-testid="run-parent" href="/runs/b1">b1</a>' in child
    parent = html_of(client, "/runs/b1")
    links = re.findall(r'data-testid="child-link" href="([^"]+)"', parent)
    assert links == ["/runs/b1-chunk-000", "/runs/b1-chunk-001"]
    assert [text_of(row).split()[0:3] for row in rows_of(parent)][1:3] == [
        ["1", "(branch", "1)"],
        ["1", "(branch", "2)"],
    ]
    assert 'class="step depth-1"' in rows_of(parent)[1]


def test_a_failed_run_shows_its_error(client: FlaskClient, engine: Engine) -> None:
    engine.start("order", {**SAMPLE_ORDER, "card_last4": "0000"}, id="declined")
    html = html_of(client, "/runs/declined")
    assert text(html, "run-error") == (
        "ActivityFailedError: activity 'charge_payment' failed after 1 attempt(s): "
        'CardDeclinedError: card ending 0000 declined for A-1001 kind: "workflow"'
    )
    failed = rows_of(html)[1]
    assert text(failed, "step-status") == "failed"
    assert text(failed, "step-detail") == "CardDeclinedError: card ending 0000 declined for A-1001"
    assert 'data-testid="value-result"' not in html  # no result for a failed run


# -- timeline --------------------------------------------------------------------------------


def test_the_timeline_of_a_parked_order(
    client: FlaskClient, engine: Engine, clock: VirtualClock
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    clock.advance(2 * MINUTE)
    rows = rows_of(html_of(client, "/runs/o1"))
    assert [text_of(without_values(row)) for row in rows[:2]] == [
        "1 activity reserve_inventory ok 1 0 ms 2026-01-01 00:00:00",
        "2 activity charge_payment ok 1 0 ms 2026-01-01 00:00:00",
    ]
    parked = rows[2]
    assert text(parked, "step-operation") == "signal:ship"
    assert text(parked, "step-status") == "waiting"
    assert text(parked, "step-due") == "signal wait (timeout) in 8 m 0 s"
    assert text(parked, "step-duration") == "2 m 0 s so far"
    # The bar runs from the start to now (2 of the 10 minutes the span shows), then the due mark.
    assert 'class="gantt-bar gantt-bar-waiting open"' in parked
    assert "left: 0.0%; width: 20.0%" in parked
    assert 'class="gantt-due" title="due 2026-01-01 00:10:00" style="left: 100.0%"' in parked


def test_durations_and_bars_follow_the_commits(
    client: FlaskClient, engine: Engine, clock: VirtualClock
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    clock.advance(3 * MINUTE)
    engine.signal("o1", "ship", {"carrier": "express"})
    rows = rows_of(html_of(client, "/runs/o1"))
    assert len(rows) == 5
    signal = rows[2]
    assert text(signal, "step-duration") == "3 m 0 s"
    assert "left: 0.0%; width: 100.0%" in signal and "open" not in signal
    assert "left: 99.4%; width: 0.6%" in rows[3]  # instant steps at the end keep a sliver


def test_retries_heartbeats_and_failed_attempts(probe: tuple[Engine, FlaskClient]) -> None:
    _, client = probe
    flaky = rows_of(html_of(client, "/runs/p1"))[1]
    assert text(flaky, "step-activity") == "flaky"
    assert text(flaky, "step-status") == "retrying"
    assert text(flaky, "step-attempts") == "2"
    assert texts(flaky, "failed-attempt") == [
        "attempt 1 failed 2026-01-01 00:00:00: ConnectionError: upstream said 503; retry 1.0 s ago",
        "attempt 2 failed 2026-01-01 00:00:31: ConnectionError: upstream said 503; retry in 30.0 s",
    ]
    assert text(flaky, "step-heartbeat") == 'heartbeat of attempt 2, in 0 ms: {"page":3}'
    assert text(flaky, "step-due") == "due in 30.0 s"
    assert find(flaky, "step-detail") == []  # the lines above say all its detail says


def test_events_list_signals_updates_and_the_end(client: FlaskClient, engine: Engine) -> None:
    engine.start("approval", APPROVAL, id="a1")
    engine.update("a1", "comment", {"by": "ada", "text": "cheaper early"})
    engine.signal("a1", "approve", {"by": "grace"})
    events = find(html_of(client, "/runs/a1"), "event-row")
    assert [event.attrs["data-type"] for event in events] == [
        "run.started",
        "step.completed",
        "update.applied",
        "step.completed",
        "step.completed",
        "step.completed",
        "run.completed",
    ]
    assert events[2].text == "2026-01-01 00:00:00 update.applied comment"
    engine.start("order", SAMPLE_ORDER, id="o1")
    engine.signal("o1", "ship", {"carrier": "express"})
    received = [e for e in find(html_of(client, "/runs/o1"), "event-row")][3]
    assert received.text == "2026-01-01 00:00:00 signal.received step 3 signal:ship"


def test_a_long_event_log_says_where_the_rest_is(
    client: FlaskClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    assert "events-cut" not in html_of(client, "/runs/o1")
    monkeypatch.setattr(timeline, "EVENT_LIMIT", 2)
    html = html_of(client, "/runs/o1")
    assert len(find(html, "event-row")) == 2
    last = engine.events("o1", limit=2)[-1]["event_id"]
    assert text(html, "events-cut") == (
        f"The first 2 events; weft events o1 --after '{last}' lists the rest."
    )


def test_teardown_shows_each_finalizer(probe: tuple[Engine, FlaskClient]) -> None:
    engine, client = probe
    engine.cancel("p1")
    html = html_of(client, "/runs/p1")
    assert text(html, "teardown-status") == "pending"
    assert text(html, "teardown").startswith(
        "teardown pending (after the run cancelled); next attempt in 1.0 s"
    )
    flaky = rows_of(html)[1]  # its detail now says why it stopped; the heartbeat stays apart
    assert text(flaky, "step-detail") == "the run was cancelled while it waited"
    assert text(flaky, "step-heartbeat").startswith("heartbeat of attempt 2")
    # Cancelled, but its teardown is not over: the section keeps refreshing.
    assert find(html, "run-section")[0].attrs["hx-trigger"] == "every 2s, shown"
    assert texts(html, "finalizer-row") == [
        '1 undo pending 1 {"type":"RuntimeError","message":"undo broke"}'
    ]


# -- values ----------------------------------------------------------------------------------


def test_a_long_input_is_folded_and_fetched_when_opened(
    client: FlaskClient, engine: Engine
) -> None:
    note = "x" * 3000 + "THE-END"
    engine.start("order", {**SAMPLE_ORDER, "note": note}, id="long")
    html = html_of(client, "/runs/long")
    folded = re.search(
        r'<details class="folded" data-testid="value-input".*?</details>', html, re.S
    )
    assert folded is not None
    assert 'hx-get="/runs/long/value/input"' in folded[0]
    assert "THE-END" not in html  # the page carries the first characters only
    summary = compact({**SAMPLE_ORDER, "note": note})[:FOLD_CHARS]
    assert text(html, "value-input").startswith(f"{summary}… (3144 characters)")
    full = html_of(client, "/runs/long/value/input")
    assert "THE-END" in full and full.startswith('<pre data-testid="value-full">')
    assert html_of(client, "/runs/o-none/value/input", 404)
    assert html_of(client, "/runs/long/value/secret", 404)


def test_a_short_value_is_shown_whole(client: FlaskClient, engine: Engine) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    html = html_of(client, "/runs/o1")
    assert '<pre data-testid="value-input">' in html and "<details" not in html


# -- refresh and missing runs ----------------------------------------------------------------


def test_the_section_refreshes_itself_until_the_run_ends(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    section = html_of(client, "/runs/o1/section")
    assert section.lstrip().startswith("{#") is False
    poll = re.search(r'hx-get="([^"]+)" data-live hx-trigger="every 2s, shown"', section)
    assert poll is not None and poll.group(1).startswith("/runs/o1/section?shown=")
    engine.signal("o1", "ship", None)
    assert "hx-trigger" not in html_of(client, "/runs/o1/section")


def test_an_unknown_run_is_a_404_page(client: FlaskClient) -> None:
    html = html_of(client, "/runs/no-such-run", 404)
    assert 'data-testid="run-missing"' in html and "no-such-run" in html


def test_an_id_with_slashes_has_its_page(client: FlaskClient, engine: Engine) -> None:
    engine.start("order", SAMPLE_ORDER, id="orders/2026/A-1")
    assert text(html_of(client, "/runs/orders/2026/A-1"), "run-id") == "orders/2026/A-1"
    assert "hx-trigger" in html_of(client, "/runs/orders/2026/A-1/section")


def test_an_input_offloaded_to_s3_is_folded_and_fetched_on_demand(clock: VirtualClock) -> None:
    """On DynamoDB with S3 offload the state item holds a pointer; the page still folds the
    input and its endpoint serves it whole, read back through the adapter."""
    import boto3

    from weft_serverless.storage import keys
    from weft_serverless.storage.dynamodb_items import key_attributes
    from weft_serverless.testing_moto import moto_dynamodb

    note = "y" * 40_000 + "THE-END"  # over the 32 KiB offload threshold
    with moto_dynamodb() as moto:
        s3 = boto3.client("s3", region_name=moto.region)
        s3.create_bucket(Bucket="weft-values")
        storage = moto.storage(s3_client=s3, offload_bucket="weft-values")
        engine = Engine.create(
            storage, example_workflows, clock=clock, background_tasks="manual", recover=False
        )
        engine.start("order", {**SAMPLE_ORDER, "note": note}, id="big")
        item = moto.client.get_item(
            TableName=storage.table_name, Key=key_attributes(keys.state_key("big"))
        )["Item"]
        assert "s3" in item and "v" not in item  # the state lives in S3
        client = create_app(Console(engine, "t"), config={"TESTING": True}).test_client()
        html = html_of(client, "/runs/big")
        assert "THE-END" not in html and len(html) < 20_000
        assert len(find(html, "value-input")) == 1
        assert "THE-END" in text(html_of(client, "/runs/big/value/input"), "value-full")
        engine.close()


# -- step values ------------------------------------------------------------------------------


def test_each_step_shows_its_input_and_output_and_a_signal_its_payload(
    client: FlaskClient, engine: Engine
) -> None:
    engine.start("order", SAMPLE_ORDER, id="o1")
    engine.signal("o1", "zz", {"early": True})  # buffered: nobody waits for it
    html = html_of(client, "/runs/o1")
    assert texts(html, "buffered-signal") == ['zz {"early":true}']
    engine.signal("o1", "ship", {"carrier": "express"})
    rows = rows_of(html_of(client, "/runs/o1"))
    reserve, _, shipped = rows[:3]
    assert text(reserve, "step-input") == f"input {compact(SAMPLE_ORDER)}"
    assert text(reserve, "step-output") == 'output {"reservation_id":"res-A-1001"}'
    assert text(shipped, "step-output") == 'payload {"carrier":"express"}'
    assert find(shipped, "step-input") == []


def test_a_long_step_value_is_folded_and_fetched_when_opened(
    client: FlaskClient, engine: Engine
) -> None:
    note = "n" * 3000 + "THE-END"
    engine.start("order", {**SAMPLE_ORDER, "note": note}, id="o1")
    html = html_of(client, "/runs/o1")
    slot = find(html, "step-row")[0].attrs["data-slot"]
    folded = find(html, f"value-input@{slot}")
    assert folded[0].tag == "details" and "THE-END" not in html
    assert folded[0].attrs["hx-get"] == f"/runs/o1/value/input@{slot}"
    assert "THE-END" in text(html_of(client, f"/runs/o1/value/input@{slot}"), "value-full")
    html_of(client, "/runs/o1/value/input@99999999", 404)
    html_of(client, f"/runs/o1/value/secret@{slot}", 404)


def test_a_run_started_by_a_schedule_links_it(client: FlaskClient, engine: Engine) -> None:
    from examples.scheduled_report import SCHEDULE_ID, ensure_schedule

    ensure_schedule(engine)
    run = engine.get_schedule(SCHEDULE_ID).trigger()
    assert run is not None
    link = find(html_of(client, f"/runs/{run.id}"), "run-schedule")[0]
    assert (link.text, link.attrs["href"]) == (SCHEDULE_ID, f"/schedules/#schedule-{SCHEDULE_ID}")
    schedules = html_of(client, "/schedules/")
    assert f'id="schedule-{SCHEDULE_ID}"' in schedules
    engine.start("order", SAMPLE_ORDER, id="o1")
    assert find(html_of(client, "/runs/o1"), "run-schedule") == []
