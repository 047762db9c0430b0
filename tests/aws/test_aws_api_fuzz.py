"""schemathesis against the API handler, in process: every operation of ``docs/openapi.json``
in positive and negative cases, then stateful sequences along the document's links.

The handler is called as API Gateway's REST API calls it (a WSGI adapter turns each request
into the proxy event ``weft dev`` builds), with the serverless engine (``workflow-lease``) on
memory storage: moto costs about 150 ms a start and half a second a list on this machine,
which would take the run far past its minute (the DynamoDB adapter has its own conformance
suite). Each case, and each stateful scenario, gets a fresh deployment (``World``): a new
engine on its own copy of one template store holding what id-taking operations need: a
parked run, finished, failed, sleeping and pending ones, one waiting on an asynchronous
activity, a schedule and a bulk operation. schemathesis
dictionaries offer their ids, the registered workflow types and the signal, update and query
names in place of generated values half of the time (``World.aim`` does it for the ids made
at setup), so cases reach real objects and not only 404s.

Checks: no 5xx, and every response as the document says (status, content type, body schema,
headers), plus the stateful checks (a deleted object stays gone, a created one can be read).
Left out, with the reason: ``positive_data_acceptance`` and ``negative_data_rejection`` judge
requests, not responses, and the document cannot say what a deployment accepts (registered
types, declared search attributes, what a validator refuses) nor count UTF-8 bytes, where it
is deliberately narrower than the server (ADR 0041); ``ignored_auth`` and
``missing_required_header`` test SigV4, which API Gateway checks before the handler runs.
The budget (examples per operation, steps per scenario) keeps the module near a minute.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import aws_flows
import schemathesis
from aws_support import FakeMonotonic
from hypothesis import HealthCheck, settings

from weft_serverless import Engine, MemoryStorage, lambda_events
from weft_serverless.aws import LocalContext, build_engine, make_api_handler
from weft_serverless.testing import VirtualClock

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
EXAMPLES_PER_OPERATION = 12
STATEFUL = settings(
    max_examples=25,
    stateful_step_count=8,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
LEFT_OUT = (
    "positive_data_acceptance",
    "negative_data_rejection",
    "ignored_auth",
    "missing_required_header",
)
WORKFLOW_IDS = ("parked", "done", "failed", "sleeping", "later", "remote")


def wsgi_app(handler: Callable[[dict[str, Any], Any], Any], monotonic: FakeMonotonic) -> Any:
    """The API handler behind WSGI, as API Gateway's REST API fronts it."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        raw = environ.get("REQUEST_URI") or environ.get("RAW_URI")
        if not raw:
            raw = quote(environ.get("PATH_INFO", "/").encode("latin-1"))
            if environ.get("QUERY_STRING"):
                raw += "?" + environ["QUERY_STRING"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = [
            (key[5:].replace("_", "-").title(), str(value))
            for key, value in environ.items()
            if key.startswith("HTTP_")
        ]
        if environ.get("CONTENT_TYPE"):
            headers.append(("Content-Type", environ["CONTENT_TYPE"]))
        event = lambda_events.rest_event(environ["REQUEST_METHOD"], raw, headers, body)
        response = handler(event, LocalContext(29.0, monotonic))  # an exception fails the test
        status, out_headers, payload = lambda_events.response_parts(response)
        start_response(f"{status} -", [*out_headers, ("Content-Length", str(len(payload)))])
        return [payload]

    return app


DICTIONARIES = {
    "workflow_ids": list(WORKFLOW_IDS),
    "schedule_ids": ["nightly"],
    "names": ["approve", "add", "items", "explode", "go"],
    "types": sorted(aws_flows.workflows),
}


@functools.cache
def _template() -> tuple[MemoryStorage, str, str]:
    """The store every world copies: a parked run, finished, failed, sleeping and pending
    ones, one waiting on an asynchronous activity, a schedule and a bulk operation; with the
    operation's id and the activity's token, which no dictionary can hold in advance."""
    aws_flows.reset()
    storage = MemoryStorage()
    engine = build_engine(storage=storage, workflows=aws_flows.workflows, clock=VirtualClock())
    engine.start("approval", {"order": 1}, id="parked")
    engine.start("greeter", "you", id="done")
    engine.start("failing", None, id="failed")
    engine.start("napper", 3600, id="sleeping")
    engine.start("greeter", "later", id="later", start_after=3600)
    engine.start("awaits_remote", None, id="remote")
    engine.schedule("nightly", "greeter", "night", every=3600)
    preview = engine.cancel_all(workflow_type="limited", dry_run=True)
    operation = engine.cancel_all(workflow_type="limited", confirm=preview.token)
    engine.runtime.fence.release_parked()
    engine.close()
    return storage, operation.id, aws_flows.TOKENS[0]


def _copy(storage: MemoryStorage) -> MemoryStorage:
    """A store holding what ``storage`` holds, written to apart from it: values are immutable
    bytes, so copying each partition's key list and value map is enough (half a millisecond,
    where building the objects anew takes some 50 ms, and the run thousands of worlds)."""
    copy = MemoryStorage()
    copy._partitions = {  # a test's snapshot of the store it built
        name: dataclasses.replace(part, sorts=list(part.sorts), values=dict(part.values))
        for name, part in storage._partitions.items()
    }
    return copy


@dataclass
class World:
    """One deployment: an engine on a fresh copy of a store that holds the objects operations
    act on (``_template``, built once). Each case (and each stateful scenario) gets its own,
    so a failure replays the same way; its engine is new, as a fresh container's is, with
    nothing in memory from the one that wrote the store. The API handler in front of it is
    built once (``APP``), as a container builds it once, and asks for the current world's
    engine on each request."""

    engine: Engine
    operation_id: str
    token: str
    current: ClassVar[World | None] = None

    @classmethod
    def make(cls) -> World:
        storage, operation_id, token = _template()
        engine = build_engine(
            storage=_copy(storage), workflows=aws_flows.workflows, clock=VirtualClock()
        )
        cls.current = cls(engine, operation_id, token)
        return cls.current

    @classmethod
    def engine_of_current(cls) -> Engine:
        assert cls.current is not None, "World.make() comes before any request"
        return cls.current.engine

    def aim(self, case: Any) -> None:
        """Point half the bulk operation ids and activity tokens (chosen by the generated
        value's length, so a replay chooses alike) at this world's own, which no dictionary
        can hold in advance."""
        value = (case.path_parameters or {}).get("operation_id")
        if value is not None and len(str(value)) % 2 == 0:
            case.path_parameters["operation_id"] = self.operation_id
        body = case.body
        if isinstance(body, dict) and isinstance(body.get("token"), str) and len(body["token"]) % 2:
            body["token"] = self.token


HALF = 0.5
CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 250,
        "suppress-health-check": ["all"],
        "generation": {
            "mode": "all",
            "max-examples": EXAMPLES_PER_OPERATION,
            "no-shrink": True,  # a failure is reported as found: shrinking costs minutes
        },
        "checks": {name: {"enabled": False} for name in LEFT_OUT},
        "dictionaries": {name: {"values": values} for name, values in DICTIONARIES.items()},
        "parameters": {
            "path.workflow_id": {"dictionary": "workflow_ids", "probability": HALF},
            "path.schedule_id": {"dictionary": "schedule_ids", "probability": HALF},
            "path.name": {"dictionary": "names", "probability": HALF},
            "body.workflow_type": {"dictionary": "types", "probability": HALF},
            "body.name": {"dictionary": "names", "probability": HALF},
            "query.workflow_type": {"dictionary": "types", "probability": HALF},
        },
    }
)
SCHEMA = schemathesis.openapi.from_path(DOCUMENT, config=CONFIG)
MONOTONIC = FakeMonotonic()
APP = wsgi_app(
    make_api_handler(
        engine_factory=World.engine_of_current, sleep=MONOTONIC.sleep, monotonic=MONOTONIC
    ),
    MONOTONIC,
)


@SCHEMA.parametrize()
@settings(database=None)
def test_every_operation_answers_as_documented(case: Any) -> None:
    world = World.make()
    world.aim(case)
    case.call_and_validate(app=APP)
    world.engine.close()


def test_sequences_along_the_links_answer_as_documented() -> None:
    class Sequences(SCHEMA.as_state_machine()):  # type: ignore[misc]
        world: World

        def setup(self) -> None:
            self.world = World.make()

        def teardown(self) -> None:
            self.world.engine.close()

        def before_call(self, case: Any) -> None:
            self.world.aim(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"app": APP}

    Sequences.run(settings=STATEFUL)
