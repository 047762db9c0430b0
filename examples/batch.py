"""A fan-out/fan-in batch job: invoice every account, in chunks, then publish one report.

What it shows: the parent splits its input into chunks and starts one child workflow per
chunk, all at once (``ctx.all`` over ``ctx.start_child``); each child fans out again, one
durable step per account (``ctx.all`` over ``ctx.run``); results flow back up and the parent
aggregates them (fan-in) into a report. An account that cannot be invoiced is counted as
failed in the report instead of failing the whole batch: partial failure is the normal case
for a batch job, and a rerun would then touch only what failed.

Each child gets an id derived from the batch id and its chunk number, so its progress is
visible on its own (``GET /workflows/inv-2026-01-chunk-000``) and the batch never starts a
chunk twice. Invoice ids are derived from batch and account, so a repeated step (after a
crash) re-sends the same invoice rather than a second one.

Try it under ``weft dev`` (the port is printed at startup)::

    curl -s -X POST localhost:8080/workflows -H 'content-type: application/json' \\
      -d '{"workflow_type": "batch", "id": "inv-2026-01", "input": {"batch_id": "inv-2026-01",
           "chunk_size": 2, "rate_cents": 12, "accounts": [
             {"account": "acme", "email": "ap@acme.test", "usage": [10, 20]},
             {"account": "globex", "email": "billing@globex.test", "usage": [5]},
             {"account": "initech", "email": "", "usage": [7]}]}}'
    curl -s localhost:8080/workflows/inv-2026-01/result
    curl -s 'localhost:8080/workflows?workflow_type=batch_chunk'
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from weft_serverless import WorkflowContext, workflow

Account = dict[str, Any]

DEFAULT_CHUNK_SIZE = 25
DEFAULT_RATE_CENTS = 10


def invoice_account(job: dict[str, Any]) -> dict[str, Any]:
    """Compute and email one invoice; an account without an email is reported, not raised."""
    account = job["account"]
    invoice_id = f"{job['batch_id']}-{account['account']}"
    if not account.get("email"):
        print(f"  [billing]   skip {account['account']}: no billing email")
        return {"account": account["account"], "ok": False, "error": "no billing email"}
    total = sum(account.get("usage", [])) * job["rate_cents"]
    print(f"  [billing]   invoice {invoice_id}: {total} cents to {account['email']}")
    return {"account": account["account"], "ok": True, "invoice_id": invoice_id, "cents": total}


def publish_report(report: dict[str, Any]) -> dict[str, Any]:
    """Publish the batch report (pretend: print it); keyed by batch id, so repeats overwrite."""
    print(
        f"  [report]    {report['batch_id']}: {report['invoiced']} invoiced, "
        f"{report['failed']} failed, {report['total_cents']} cents"
    )
    return {"report_id": f"report-{report['batch_id']}"}


def batch(ctx: WorkflowContext, job: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    """Fan out one child per chunk, wait for all, aggregate, publish."""
    accounts: list[Account] = job.get("accounts", [])
    size = int(job.get("chunk_size", DEFAULT_CHUNK_SIZE))
    chunks = [accounts[i : i + size] for i in range(0, len(accounts), size)]
    children = [
        ctx.start_child(
            "batch_chunk",
            {
                "batch_id": job["batch_id"],
                "chunk": number,
                "rate_cents": job.get("rate_cents", DEFAULT_RATE_CENTS),
                "accounts": chunk,
            },
            id=f"{ctx.workflow_id}-chunk-{number:03d}",
        )
        for number, chunk in enumerate(chunks)
    ]
    results: list[dict[str, Any]] = (yield ctx.all(*children)) if children else []
    rows = [row for summary in results for row in summary["rows"]]
    report = {
        "batch_id": job["batch_id"],
        "chunks": len(chunks),
        "invoiced": sum(1 for row in rows if row["ok"]),
        "failed": sum(1 for row in rows if not row["ok"]),
        "total_cents": sum(row.get("cents", 0) for row in rows),
        "failures": [{"account": r["account"], "error": r["error"]} for r in rows if not r["ok"]],
    }
    published = yield ctx.run(publish_report, report)
    return {**report, "report_id": published["report_id"]}


def batch_chunk(ctx: WorkflowContext, chunk: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    """Invoice every account of one chunk in parallel steps; return one row per account."""
    jobs = [
        ctx.run(
            invoice_account,
            {"batch_id": chunk["batch_id"], "rate_cents": chunk["rate_cents"], "account": account},
        )
        for account in chunk["accounts"]
    ]
    rows: list[dict[str, Any]] = (yield ctx.all(*jobs)) if jobs else []
    return {"chunk": chunk["chunk"], "rows": rows}


batch_workflow = (
    workflow("batch", version="1").activities(publish_report=publish_report).execute(batch)
)
batch_chunk_workflow = (
    workflow("batch_chunk", version="1")
    .activities(invoice_account=invoice_account)
    .execute(batch_chunk)
)

workflows = {"batch": batch_workflow, "batch_chunk": batch_chunk_workflow}

SAMPLE_INPUT: dict[str, Any] = {
    "batch_id": "inv-2026-01",
    "chunk_size": 2,
    "rate_cents": 12,
    "accounts": [
        {"account": "acme", "email": "ap@acme.test", "usage": [10, 20]},
        {"account": "globex", "email": "billing@globex.test", "usage": [5]},
        {"account": "initech", "email": "", "usage": [7]},
    ],
}
