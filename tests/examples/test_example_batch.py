"""examples/batch.py end to end: children fan out, results fan in, through the API."""

from __future__ import annotations

import pytest
from example_support import Stack, effects

from examples.batch import SAMPLE_INPUT


def test_the_batch_invoices_every_account_and_reports_failures(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN a batch of three accounts is started in chunks of two
    reply = stack.start("batch", "inv-2026-01", SAMPLE_INPUT)

    # THEN both chunks ran as children and the parent aggregated them, all inline
    assert reply.status == 201
    assert reply.body["status"] == "completed"
    assert reply.body["result"] == {
        "batch_id": "inv-2026-01",
        "chunks": 2,
        "invoiced": 2,
        "failed": 1,
        "total_cents": 420,
        "failures": [{"account": "initech", "error": "no billing email"}],
        "report_id": "report-inv-2026-01",
    }
    # (the chunks' activities run together: their lines come in any order, the report last)
    *billing, report = effects(capsys.readouterr().out)
    assert sorted(billing) == [
        "[billing]   invoice inv-2026-01-acme: 360 cents to ap@acme.test",
        "[billing]   invoice inv-2026-01-globex: 60 cents to billing@globex.test",
        "[billing]   skip initech: no billing email",
    ]
    assert report == "[report]    inv-2026-01: 2 invoiced, 1 failed, 420 cents"
    # AND each chunk is a workflow of its own, with the batch as its parent
    chunks = stack.call("GET", "/workflows", query={"workflow_type": "batch_chunk"}).body
    ids = sorted(row["id"] for row in chunks["items"])
    assert ids == ["inv-2026-01-chunk-000", "inv-2026-01-chunk-001"]
    chunk = stack.call("GET", "/workflows/inv-2026-01-chunk-001").body
    assert chunk["parent_id"] == "inv-2026-01"
    assert chunk["result"]["rows"][0]["account"] == "initech"


def test_the_same_batch_id_is_not_started_twice(stack: Stack) -> None:
    stack.start("batch", "inv-2026-02", {**SAMPLE_INPUT, "batch_id": "inv-2026-02"})

    again = stack.start("batch", "inv-2026-02", {**SAMPLE_INPUT, "batch_id": "inv-2026-02"})

    assert (again.status, again.body["code"]) == (409, "WorkflowAlreadyExistsError")


def test_an_empty_batch_publishes_an_empty_report(stack: Stack) -> None:
    reply = stack.start("batch", "inv-empty", {"batch_id": "inv-empty", "accounts": []})

    assert reply.body["result"]["chunks"] == 0
    assert reply.body["result"]["invoiced"] == 0
