"""Every API route on moto DynamoDB, through the REST proxy events API Gateway sends."""

from __future__ import annotations

import base64
import json
from typing import Any

import aws_flows
from aws_support import Api, FakeMonotonic

from weft_serverless import Engine
from weft_serverless.testing import VirtualClock


def test_start_runs_inline_and_returns_the_finished_workflow(api: Api) -> None:
    reply = api("POST", "/workflows", {"workflow_type": "greeter", "input": "ada", "id": "g-1"})

    assert reply.status == 201
    assert reply.body["id"] == "g-1"
    assert reply.body["status"] == "completed"
    assert reply.body["result"] == {"greeting": "hello ada"}
    assert reply.body["workflow_type"] == "greeter"
    assert reply.body["owner"] is None  # the claim was released at invocation end
    assert reply.headers["Content-Type"] == "application/json"


def test_start_without_an_id_generates_one(api: Api) -> None:
    reply = api("POST", "/workflows", {"workflow_type": "greeter", "input": "bo"})
    assert reply.status == 201
    assert len(reply.body["id"]) == 32
    assert api("GET", f"/workflows/{reply.body['id']}").body["status"] == "completed"


def test_start_with_an_idempotency_key_returns_the_first_run(api: Api) -> None:
    first = api("POST", "/workflows", {"workflow_type": "greeter", "idempotency_key": "k1"})
    second = api("POST", "/workflows", {"workflow_type": "greeter", "idempotency_key": "k1"})
    assert second.status == 201
    assert second.body["id"] == first.body["id"]
    assert aws_flows.CALLS["greet"] == 1


def test_start_options_delay_and_deadline(api: Api, clock: VirtualClock, maintenance: Any) -> None:
    delayed = api(
        "POST",
        "/workflows",
        {"workflow_type": "greeter", "id": "later", "start_after": "1m"},
    )
    assert delayed.body["status"] == "pending"
    at = api(
        "POST",
        "/workflows",
        {"workflow_type": "greeter", "id": "at", "start_at": "2030-01-01T00:00:00Z"},
    )
    assert at.body["status"] == "pending"
    bounded = api(
        "POST",
        "/workflows",
        {"workflow_type": "napper", "id": "bounded", "input": 600, "execution_timeout": 30},
    )
    assert bounded.body["status"] == "running"

    clock.advance(61)
    maintenance_reply = maintenance({"id": "tick"}, api.context())
    assert maintenance_reply["timers_fired"] >= 2
    assert api("GET", "/workflows/later").body["status"] == "completed"
    assert api("GET", "/workflows/bounded").body["status"] == "timed-out"
    assert api("GET", "/workflows/at").body["status"] == "pending"


def test_start_waits_a_bounded_time_for_another_container_to_finish(
    api: Api, monotonic: FakeMonotonic, clock: VirtualClock, engine: Engine
) -> None:
    def elsewhere(seconds: float) -> None:  # meanwhile, the timer fires in "another container"
        if len(monotonic.sleeps) == 3:
            clock.advance(5)
            engine.run_maintenance()

    monotonic.on_sleep = elsewhere
    reply = api(
        "POST", "/workflows", {"workflow_type": "napper", "input": 5, "id": "w", "wait_seconds": 10}
    )
    assert reply.status == 201
    assert reply.body["status"] == "completed"
    assert reply.body["result"] == "rested"
    assert len(monotonic.sleeps) == 3


def test_start_wait_gives_up_when_the_wait_runs_out(api: Api, monotonic: FakeMonotonic) -> None:
    reply = api("POST", "/workflows", {"workflow_type": "napper", "input": 60, "wait_seconds": 1})
    assert reply.status == 201
    assert reply.body["status"] == "running"
    assert sum(monotonic.sleeps) == 1.0


def test_start_wait_is_capped_by_the_invocation_budget(api: Api, monotonic: FakeMonotonic) -> None:
    body = {"workflow_type": "napper", "input": 60, "wait_seconds": 25}
    reply = api("POST", "/workflows", body, timeout=6.0)
    assert reply.body["status"] == "running"
    assert sum(monotonic.sleeps) == 4.0  # 6 s left minus the 2 s step reserve


def test_describe(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "approval", "id": "a-1", "input": {"n": 1}})
    reply = api("GET", "/workflows/a-1")
    assert reply.status == 200
    assert reply.body["status"] == "running"
    assert reply.body["result"] is None and reply.body["error"] is None
    assert set(reply.body) == {
        "id",
        "workflow_type",
        "version",
        "status",
        "created_at",
        "updated_at",
        "result",
        "error",
        "parent_id",
        "owner",
        "input",
        "run",
        "concurrency_key",
        "failed_attempts",
        "waiting_for",
        "schedule_id",
    }
    assert reply.body["input"] == {"n": 1}
    assert reply.body["run"] == 1
    assert reply.body["concurrency_key"] is None  # the type has no limit
    assert reply.body["failed_attempts"] == []


def test_describe_lists_failed_attempts_with_their_errors(api: Api) -> None:
    """A failed activity's attempts are in the describe reply: step, activity, attempt,
    error type and message, when it failed and when the next attempt was due."""
    api("POST", "/workflows", {"workflow_type": "failing", "id": "f"})
    reply = api("GET", "/workflows/f")
    failures = reply.body["failed_attempts"]
    assert [(f["step"], f["activity"], f["attempt"]) for f in failures] == [
        ("1", "explode", n) for n in range(1, len(failures) + 1)
    ]
    assert all(f["error_type"] == "RuntimeError" and "boom" in f["message"] for f in failures)
    assert failures[-1]["retry_at"] is None and failures[-1]["failed_at"] is not None


def test_describe_shows_the_teardown_of_a_cancelled_run(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "guarded", "id": "g", "input": "o-1"})
    assert "teardown" not in api("GET", "/workflows/g").body  # only once an end armed one
    api("POST", "/workflows/g/cancel", {})
    teardown = api("GET", "/workflows/g").body["teardown"]
    assert teardown["reason"] == "cancelled"
    assert [(f["activity"], f["position"]) for f in teardown["finalizers"]] == [("release_hold", 1)]


def test_path_parameters_are_percent_decoded(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "order 7/eu"})
    reply = api("GET", "/workflows/order%207%2Feu")
    assert reply.status == 200
    assert reply.body["id"] == "order 7/eu"


def test_result_of_a_finished_and_of_a_running_workflow(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "greeter", "id": "done", "input": "x"})
    api("POST", "/workflows", {"workflow_type": "approval", "id": "open"})

    done = api("GET", "/workflows/done/result")
    assert done.status == 200
    assert done.body == {
        "id": "done",
        "status": "completed",
        "result": {"greeting": "hello x"},
        "error": None,
    }
    running = api("GET", "/workflows/open/result", query={"wait_seconds": "0.5"})
    assert running.status == 202
    assert running.body["status"] == "running"


def test_result_of_a_failed_workflow_carries_its_error(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "failing", "id": "f"})
    reply = api("GET", "/workflows/f/result")
    assert reply.status == 200
    assert reply.body["status"] == "failed"
    assert "boom" in json.dumps(reply.body["error"])


def test_results_with_non_json_types_are_rendered(api: Api) -> None:
    reply = api("POST", "/workflows", {"workflow_type": "rich", "id": "r"})
    assert reply.body["result"] == {
        "bytes": base64.b64encode(b"\x00\xff").decode(),
        "when": "2026-01-01T00:00:00+00:00",
        "money": "1.10",
        "tags": ["a", "b"],
        "pair": [1, 2],
        "uuid": "00000000-0000-0000-0000-000000000001",
        "7": "int key",
    }


def test_list_with_filters_and_pagination(api: Api, clock: VirtualClock) -> None:
    for n in range(5):
        clock.advance(1)
        api("POST", "/workflows", {"workflow_type": "greeter", "id": f"g{n}"})
    clock.advance(1)
    api("POST", "/workflows", {"workflow_type": "approval", "id": "a"})

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = {"workflow_type": "greeter", "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = api("GET", "/workflows", query=query)
        assert page.status == 200
        seen += [item["id"] for item in page.body["items"]]
        pages += 1
        cursor = page.body["next_cursor"]
        if cursor is None:
            break
    assert seen == ["g0", "g1", "g2", "g3", "g4"]
    assert pages == 3

    running = api("GET", "/workflows", query={"status": "running"})
    assert [item["id"] for item in running.body["items"]] == ["a"]
    assert running.body["items"][0] == {
        "id": "a",
        "workflow_type": "approval",
        "status": "running",
        "created_at": running.body["items"][0]["created_at"],
        "search_attributes": {},
        "tags": [],
    }
    assert len(api("GET", "/workflows").body["items"]) == 6


def test_signal_resumes_the_workflow(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "approval", "id": "s", "input": "o-1"})
    reply = api("POST", "/workflows/s/signals/approve", {"payload": True, "signal_id": "sig-1"})
    assert reply.status == 200
    assert reply.body == {"id": "s", "signal": "approve", "status": "completed"}
    result = api("GET", "/workflows/s/result").body["result"]
    assert result == {"order": "o-1", "approved": True, "items": []}


def test_update_and_query(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "approval", "id": "u"})
    first = api("POST", "/workflows/u/updates/add", {"payload": "apple", "update_id": "u1"})
    assert first.status == 200
    assert first.body == {"id": "u", "update": "add", "result": 1}
    again = api("POST", "/workflows/u/updates/add", {"payload": "apple", "update_id": "u1"})
    assert again.body["result"] == 1  # a repeated update id returns the first result
    api("POST", "/workflows/u/updates/add", {"payload": "pear"})

    query = api("POST", "/workflows/u/queries/items", {"arg": None})
    assert query.status == 200
    assert query.body == {"id": "u", "query": "items", "result": ["apple", "pear"]}
    assert api("POST", "/workflows/u/queries/items").body["result"] == ["apple", "pear"]


def test_cancel_suspend_resume(api: Api, clock: VirtualClock, maintenance: Any) -> None:
    api("POST", "/workflows", {"workflow_type": "napper", "id": "n", "input": 10})
    suspended = api("POST", "/workflows/n/suspend")
    assert suspended.status == 200 and suspended.body["status"] == "suspended"
    assert api("POST", "/workflows/n/suspend").body["status"] == "suspended"

    clock.advance(11)
    maintenance({"id": "t"}, api.context())
    assert api("GET", "/workflows/n").body["status"] == "suspended"  # no timer while paused

    resumed = api("POST", "/workflows/n/resume")
    assert resumed.status == 200
    assert resumed.body["status"] == "completed"

    api("POST", "/workflows", {"workflow_type": "approval", "id": "c"})
    cancelled = api("POST", "/workflows/c/cancel", {})
    assert cancelled.status == 200 and cancelled.body["status"] == "cancelled"
    assert api("POST", "/workflows/c/cancel").status == 200  # repeating it is harmless
    assert api("GET", "/workflows/c/result").body["status"] == "cancelled"


def test_resume_drives_a_running_workflow_now(api: Api, clock: VirtualClock) -> None:
    api("POST", "/workflows", {"workflow_type": "napper", "id": "r", "input": 5})
    clock.advance(6)
    assert api("POST", "/workflows/r/resume").body["status"] == "completed"


def test_complete_an_async_activity(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "awaits_remote", "id": "ok"})
    assert api("GET", "/workflows/ok").body["status"] == "running"
    [token] = aws_flows.TOKENS
    reply = api("POST", "/activities/complete", {"token": token, "result": {"paid": 42}})
    assert reply.status == 200 and reply.body == {"accepted": True}
    assert api("GET", "/workflows/ok/result").body["result"] == {"paid": 42}


def test_fail_an_async_activity(api: Api) -> None:
    api("POST", "/workflows", {"workflow_type": "awaits_remote", "id": "ko"})
    [token] = aws_flows.TOKENS
    body = {"token": token, "message": "card declined", "error_type": "PaymentError"}
    reply = api("POST", "/activities/fail", body)
    assert reply.status == 200
    result = api("GET", "/workflows/ko/result").body
    assert result["status"] == "failed"
    assert "PaymentError" in json.dumps(result["error"])
    assert "card declined" in json.dumps(result["error"])


def test_a_base64_encoded_body_is_accepted(api: Api) -> None:
    raw = base64.b64encode(json.dumps({"workflow_type": "greeter", "id": "b64"}).encode())
    reply = api("POST", "/workflows", raw_body=raw.decode(), base64=True)
    assert reply.status == 201 and reply.body["id"] == "b64"


def test_every_response_echoes_the_correlation_id(api: Api) -> None:
    given = api("GET", "/workflows", headers={"x-correlation-id": "corr-42"})
    assert given.headers["X-Correlation-Id"] == "corr-42"
    generated = api("GET", "/workflows/nope")
    assert generated.headers["X-Correlation-Id"].startswith("req-")
