"""Every error status of the API, with its JSON body, and no write for any rejected request.

Each case prepares what it needs, photographs the whole table, sends the bad request, and
checks the status, the stable ``code``, the ``field`` it names, and that the table is
byte-for-byte unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aws_flows
import pytest
from aws_support import Api, Reply, log_lines, table_items

from weft_serverless import Engine
from weft_serverless.aws import build_engine
from weft_serverless.codec import decode, encode
from weft_serverless.errors import StorageRetriesExhaustedError
from weft_serverless.storage import keys
from weft_serverless.storage.dynamodb import DynamoDBStorage
from weft_serverless.testing import VirtualClock


@dataclass(frozen=True)
class Case:
    name: str
    send: Callable[[Api], Reply]
    status: int
    code: str
    field: str | None = None
    setup: Callable[[Api], None] | None = None
    claims: bool = False  # an unknown update name is left to the live drive, which claims


def _without_epoch(items: list[tuple[str, str, bytes]]) -> list[tuple[str, str, bytes]]:
    """Items but the owner epoch and the run's head, which carries it (ADR 0037): claiming
    (then releasing) a workflow bumps it for good."""
    return [item for item in items if item[1] not in (keys.OWNER_EPOCH, keys.OWNER_HEAD)]


def _start(workflow_type: str, workflow_id: str, **body: Any) -> Callable[[Api], None]:
    def setup(api: Api) -> None:
        reply = api(
            "POST", "/workflows", {"workflow_type": workflow_type, "id": workflow_id, **body}
        )
        assert reply.status == 201, reply.body

    return setup


def _both(*steps: Callable[[Api], object]) -> Callable[[Api], None]:
    def setup(api: Api) -> None:
        for step in steps:
            step(api)

    return setup


def _used_token(api: Api) -> None:
    _start("awaits_remote", "t")(api)
    assert api("POST", "/activities/complete", {"token": aws_flows.TOKENS[0]}).status == 200


def post(path: str, body: Any = None, **kw: Any) -> Callable[[Api], Reply]:
    return lambda api: api("POST", path, body, **kw)


def start(fields: dict[str, Any]) -> Callable[[Api], Reply]:
    return post("/workflows", {"workflow_type": "greeter", **fields})


def get(path: str, **kw: Any) -> Callable[[Api], Reply]:
    return lambda api: api("GET", path, **kw)


BAD, MISSING, OVER, TOO_BIG = (
    "InvalidArgumentError",
    "WorkflowNotFoundError",
    "WorkflowNotRunningError",
    "PayloadTooLargeError",
)
BIG = "x" * 300_000  # over the engine's 256 KiB payload limit, under the 1 MiB body cap
DEEP = "[" * 5000 + "]" * 5000
running = _start("approval", "wf")
done = _start("greeter", "wf")

CASES = [
    # 400: bad input, naming the field
    Case("missing type", post("/workflows", {"input": 1}), 400, BAD, "workflow_type"),
    Case("unknown field", start({"inptu": 1}), 400, BAD, "inptu"),
    Case("id not a string", start({"id": 7}), 400, BAD, "id"),
    Case("id too long", start({"id": "x" * 257}), 400, BAD, "id"),
    Case("not json", post("/workflows", raw_body="{nope"), 400, BAD, "body"),
    Case(
        "nan",
        post("/workflows", raw_body='{"workflow_type": "greeter", "input": NaN}'),
        400,
        BAD,
        "body",
    ),
    Case("not an object", post("/workflows", [1, 2]), 400, BAD, "body"),
    Case(
        "nested 5,000 deep",
        post("/workflows", raw_body='{"workflow_type": "greeter", "input": ' + DEEP + "}"),
        400,
        BAD,
        "body",
    ),
    Case("bad base64", post("/workflows", raw_body="%%%", base64=True), 400, BAD, "body"),
    Case(
        "unknown type",
        post("/workflows", {"workflow_type": "nope"}),
        400,
        "UnknownWorkflowTypeError",
    ),
    Case("bad duration", start({"execution_timeout": "soon"}), 400, BAD, "execution_timeout"),
    Case("zero timeout", start({"execution_timeout": 0}), 400, BAD, "execution_timeout"),
    Case("naive start_at", start({"start_at": "2030-01-01T00:00:00"}), 400, BAD, "start_at"),
    Case("bad start_at", start({"start_at": "tomorrow"}), 400, BAD, "start_at"),
    Case("wait too long", start({"wait_seconds": 30}), 400, BAD, "wait_seconds"),
    Case("tag not a string", start({"tags": [[1]]}), 400, "InvalidTagError", "tags"),
    Case(
        "bulk filter tag not a string",
        post("/bulk/cancel", {"filter": {"tags": [{}]}, "dry_run": True}),
        400,
        "InvalidTagError",
        "tags",
    ),
    Case("bool is not a number", start({"wait_seconds": True}), 400, BAD, "wait_seconds"),
    Case("limit not a number", get("/workflows", query={"limit": "ten"}), 400, BAD, "limit"),
    Case("limit zero", get("/workflows", query={"limit": "0"}), 400, BAD, "limit"),
    Case("bad status", get("/workflows", query={"status": "sleeping"}), 400, BAD, "status"),
    Case("unknown query param", get("/workflows", query={"colour": "red"}), 400, BAD, "colour"),
    Case("foreign cursor", get("/workflows", query={"cursor": "nope"}), 400, BAD),
    Case("workflow id too long", get("/workflows/" + "x" * 300), 400, BAD, "workflow_id"),
    Case("control char id", get("/workflows/a%07b"), 400, BAD, "workflow_id"),
    Case(
        "update rejected",
        post("/workflows/wf/updates/add", {"payload": ""}),
        400,
        "UpdateValidationError",
        None,
        running,
    ),
    Case(
        "unknown update",
        post("/workflows/wf/updates/nope", {}),
        400,
        "UnknownUpdateError",
        None,
        running,
        claims=True,
    ),
    Case(
        "unknown query",
        post("/workflows/wf/queries/nope", {}),
        400,
        "UnknownQueryError",
        None,
        running,
    ),
    Case(
        "signal id too long",
        post("/workflows/wf/signals/approve", {"signal_id": "s" * 129}),
        400,
        BAD,
        "signal_id",
        running,
    ),
    Case(
        "bad error type",
        post("/activities/fail", {"token": "t", "message": "m", "error_type": "no spaces"}),
        400,
        BAD,
        "error_type",
    ),
    Case("missing message", post("/activities/fail", {"token": "t"}), 400, BAD, "message"),
    Case(
        "body on cancel", post("/workflows/wf/cancel", {"force": True}), 400, BAD, "force", running
    ),
    # 404: unknown workflow, token or route
    Case("describe missing", get("/workflows/missing"), 404, MISSING),
    Case("result missing", get("/workflows/missing/result"), 404, MISSING),
    Case("signal missing", post("/workflows/missing/signals/go", {"payload": 1}), 404, MISSING),
    Case("update missing", post("/workflows/missing/updates/add", {"payload": "a"}), 404, MISSING),
    Case("query missing", post("/workflows/missing/queries/items"), 404, MISSING),
    Case("cancel missing", post("/workflows/missing/cancel"), 404, MISSING),
    Case("suspend missing", post("/workflows/missing/suspend"), 404, MISSING),
    Case("resume missing", post("/workflows/missing/resume"), 404, MISSING),
    Case(
        "bogus token",
        post("/activities/complete", {"token": "bogus"}),
        404,
        "ActivityTokenNotFoundError",
    ),
    Case(
        "bogus token fail",
        post("/activities/fail", {"token": "bogus", "message": "m"}),
        404,
        "ActivityTokenNotFoundError",
    ),
    Case(
        "used token",
        lambda api: api("POST", "/activities/complete", {"token": aws_flows.TOKENS[0]}),
        404,
        "ActivityTokenNotFoundError",
        None,
        _used_token,
    ),
    Case("unknown route", get("/nowhere"), 404, "NotFound"),
    Case("unknown sub-route", post("/workflows/wf/poke"), 404, "NotFound"),
    # 405: known path, other method
    Case("put a workflow", lambda api: api("PUT", "/workflows/wf"), 405, "MethodNotAllowed"),
    # 429: a concurrency limit reached
    Case(
        "concurrency limit",
        post("/workflows", {"workflow_type": "limited", "id": "l2", "input": {"account": "a"}}),
        429,
        "WorkflowConcurrencyLimitExceededError",
        None,
        _start("limited", "l1", input={"account": "a"}),
    ),
    # 409: conflicts with the workflow's state
    Case("duplicate id", start({"id": "wf"}), 409, "WorkflowAlreadyExistsError", None, done),
    Case(
        "signal finished",
        post("/workflows/wf/signals/approve", {"payload": 1}),
        409,
        OVER,
        None,
        done,
    ),
    Case(
        "update finished",
        post("/workflows/wf/updates/add", {"payload": "a"}),
        409,
        OVER,
        None,
        done,
    ),
    Case("cancel finished", post("/workflows/wf/cancel"), 409, OVER, None, done),
    Case("suspend finished", post("/workflows/wf/suspend"), 409, OVER, None, done),
    Case("resume finished", post("/workflows/wf/resume"), 409, OVER, None, done),
    Case(
        "suspend cancelled",
        post("/workflows/wf/suspend"),
        409,
        OVER,
        None,
        _both(running, lambda api: api("POST", "/workflows/wf/cancel")),
    ),
    # 413: oversized payloads
    Case("huge body", start({"input": "y" * (1024 * 1024)}), 413, TOO_BIG, "body"),
    Case("big input", start({"input": BIG}), 413, TOO_BIG, "input"),
    Case(
        "big signal",
        post("/workflows/wf/signals/approve", {"payload": BIG}),
        413,
        TOO_BIG,
        "payload",
        running,
    ),
    Case(
        "big update",
        post("/workflows/wf/updates/add", {"payload": BIG}),
        413,
        TOO_BIG,
        "payload",
        running,
    ),
    Case(
        "big activity result",
        lambda api: api(
            "POST", "/activities/complete", {"token": aws_flows.TOKENS[0], "result": BIG}
        ),
        413,
        TOO_BIG,
        "result",
        _start("awaits_remote", "t"),
    ),
    # 422: the update handler raised
    Case(
        "update failed",
        post("/workflows/wf/updates/explode", {}),
        422,
        "UpdateFailedError",
        None,
        running,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_rejected_requests_answer_json_and_write_nothing(
    case: Case, api: Api, client: Any, dynamodb_table: str
) -> None:
    if case.setup is not None:
        case.setup(api)
    before = table_items(client, dynamodb_table)

    reply = case.send(api)

    assert reply.status == case.status, reply.body
    assert reply.code == case.code, reply.body
    assert reply.body.get("field") == case.field, reply.body
    assert isinstance(reply.body["message"], str) and reply.body["message"]
    assert set(reply.body) <= {"code", "message", "field", "issues", "retryable", *LIMIT_FIELDS}
    after = table_items(client, dynamodb_table)
    if case.claims:  # the claim is released again at the end: only the epoch moved on
        before, after = _without_epoch(before), _without_epoch(after)
    assert after == before


LIMIT_FIELDS = ("workflow_type", "key", "limit")


def test_a_concurrency_limit_answers_429_with_type_key_and_limit(api: Api) -> None:
    _start("limited", "l1", input={"account": "a"})(api)
    reply = api("POST", "/workflows", {"workflow_type": "limited", "input": {"account": "a"}})
    assert reply.status == 429
    assert {name: reply.body[name] for name in LIMIT_FIELDS} == {
        "workflow_type": "limited",
        "key": "a",
        "limit": 1,
    }
    assert reply.body["retryable"] is True
    other = api("POST", "/workflows", {"workflow_type": "limited", "input": {"account": "b"}})
    assert other.status == 201, other.body
    assert api("GET", "/workflows/l1").body["concurrency_key"] == "a"


def test_validation_issues_are_listed(api: Api) -> None:
    running(api)
    reply = api("POST", "/workflows/wf/updates/add", {"payload": 3})
    assert reply.body["issues"] == [{"message": "item must be a text", "path": ["payload"]}]


def test_method_not_allowed_lists_the_allowed_methods(api: Api) -> None:
    reply = api("PUT", "/workflows")
    assert reply.status == 405
    assert reply.headers["Allow"] == "GET, POST"


def test_a_workflow_held_by_another_engine_is_a_retryable_conflict(
    api: Api, client: Any, dynamodb_table: str, clock: VirtualClock, engine: Engine
) -> None:
    other = build_engine(
        storage=DynamoDBStorage(dynamodb_table, client=client),
        workflows=aws_flows.workflows,
        clock=clock,
        engine_id="other-container",
    )
    other.start("approval", id="held")  # outside an invocation: its claim is kept
    before = table_items(client, dynamodb_table)

    for reply in (
        api("POST", "/workflows/held/resume"),
        api("POST", "/workflows/held/updates/add", {"payload": "a"}),
    ):
        assert reply.status == 409
        assert reply.code == "WorkflowClaimUnavailableError"
        assert reply.body["retryable"] is True
        assert "other-container" in reply.body["message"]
    assert table_items(client, dynamodb_table) == before
    assert api("GET", "/workflows/held").body["owner"]["engine_id"] == "other-container"


def test_storage_unavailable_is_a_retryable_503(
    api: Api, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(workflow_id: str, **_: Any) -> Any:
        raise StorageRetriesExhaustedError("GetItem", 4, False, "ThrottlingException")

    monkeypatch.setattr(engine, "describe", unavailable)
    reply = api("GET", "/workflows/any")
    assert reply.status == 503
    assert reply.code == "StorageRetriesExhaustedError"
    assert reply.body["retryable"] is True


def test_an_unexpected_error_is_a_500_that_reveals_nothing(
    api: Api, engine: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(workflow_id: str, **_: Any) -> Any:
        raise KeyError("secret internal detail")

    monkeypatch.setattr(engine, "describe", broken)
    reply = api("GET", "/workflows/any", headers={"X-Correlation-Id": "c-500"})

    assert reply.status == 500
    assert reply.body == {
        "code": "InternalError",
        "message": reply.body["message"],
    }
    assert "secret" not in json.dumps(reply.body) and "Traceback" not in json.dumps(reply.body)
    logged = [line for line in log_lines(capsys.readouterr().out) if line["level"] == "ERROR"]
    assert logged and "secret internal detail" in json.dumps(logged[0])
    assert logged[0]["correlation_id"] == "c-500"


def test_a_record_from_a_newer_release_is_a_retryable_503_naming_its_code(
    api: Api, engine: Engine, client: Any, dynamodb_table: str
) -> None:
    """A run stamped with a newer schema version (a rollback, or a mixed fleet mid-deploy)
    cannot be served by this release: 503 with the error's own code and ``retryable``, not an
    anonymous 500, and the record is left exactly as stored."""
    running(api)
    storage = engine.runtime.storage
    state = keys.state_key("wf")
    raw = storage.get(state)
    assert raw is not None
    storage.put(state, encode({**decode(raw), "sv": 2}))
    before = table_items(client, dynamodb_table)

    for reply in (
        api("GET", "/workflows/wf"),
        api("POST", "/workflows/wf/signals/approve", {"payload": 1}),
        api("POST", "/workflows/wf/cancel"),
    ):
        assert reply.status == 503, reply.body
        assert reply.code == "UnsupportedSchemaVersionError"
        assert reply.body["retryable"] is True
        assert "upgrade this engine" in reply.body["message"]
    assert table_items(client, dynamodb_table) == before
