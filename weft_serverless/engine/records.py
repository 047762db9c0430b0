"""The persisted records of one workflow, and reading them back in one range read.

Records are msgpack maps. Payloads (input, results, signal payloads) are stored already
encoded as bytes inside them: their size is checked once, and replay decodes only what it uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weft_serverless.codec import SCHEMA_VERSION, decode, encode
from weft_serverless.storage import keys
from weft_serverless.storage.base import Storage

RUNNING = "running"
PENDING = "pending"
SUSPENDED = "suspended"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TIMED_OUT = "timed-out"
STATUSES = (PENDING, RUNNING, SUSPENDED, COMPLETED, FAILED, CANCELLED, TIMED_OUT)
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, TIMED_OUT})


@dataclass(slots=True)
class WorkflowState:
    """The head record of a workflow: who it is and where it stands."""

    id: str
    type: str
    version: str
    status: str
    input: bytes
    created_at: float
    updated_at: float
    result: bytes | None = None
    error: dict[str, Any] | None = None
    parent: dict[str, Any] | None = None
    idempotency_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The result is in its own record (keys.result_key): input and result did not fit in one.
    result_apart: bool = False

    def to_bytes(self) -> bytes:
        apart = {"rapart": True} if self.result_apart else {}
        return encode(
            {
                "sv": SCHEMA_VERSION,
                "id": self.id,
                "type": self.type,
                "version": self.version,
                "status": self.status,
                "input": self.input,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "result": self.result,
                "error": self.error,
                "parent": self.parent,
                "idem": self.idempotency_key,
                "extra": self.extra,
                **apart,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> WorkflowState:
        raw = decode(data)
        return cls(
            id=raw["id"],
            type=raw["type"],
            version=raw["version"],
            status=raw["status"],
            input=raw["input"],
            created_at=raw["created_at"],
            updated_at=raw["updated_at"],
            result=raw.get("result"),
            error=raw.get("error"),
            parent=raw.get("parent"),
            idempotency_key=raw.get("idem"),
            extra=raw.get("extra") or {},
            result_apart=bool(raw.get("rapart")),
        )


MAX_ERROR_MESSAGE = 4096


def cut_message(message: str) -> str:
    """Long error messages are cut, so a failure always fits in one record."""
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[:MAX_ERROR_MESSAGE] + f"... [{len(message) - MAX_ERROR_MESSAGE} more characters]"


def error_record(kind: str, error_type: str, message: str, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "type": error_type[:256], "message": cut_message(message), **fields}


@dataclass(slots=True)
class History:
    """Everything stored in one workflow's partition, grouped for the driver."""

    state: WorkflowState
    state_bytes: bytes
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    signals: dict[str, list[tuple[str, bytes, dict[str, Any]]]] = field(default_factory=dict)
    children: dict[str, dict[str, Any]] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    updates_applied: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    update_responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    async_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: dict[str, dict[str, Any]] = field(default_factory=dict)

    def top_level_steps(self) -> int:
        return sum(1 for slot in self.ops if "." not in slot)


def load_history(storage: Storage, workflow_id: str) -> History | None:
    """Read a workflow's partition (one ordered, strongly consistent range read)."""
    state_bytes: bytes | None = None
    h = History(_PLACEHOLDER, b"")
    for sort, value in storage.scan(keys.workflow_partition(workflow_id)):
        h.raw[sort] = value
        family, _, rest = sort.partition("#")
        if sort == keys.STATE:
            state_bytes = value
        elif family == "op":
            h.ops[rest] = decode(value)
        elif family == "pend":
            h.pending[rest] = decode(value)
        elif family == "att":
            h.attempts.setdefault(rest.rsplit("#", 1)[0], []).append(decode(value))
        elif family == "sig":
            name = keys.dec(rest.split("#", 1)[0])
            h.signals.setdefault(name, []).append((sort, value, decode(value)))
        elif family == "child":
            h.children[rest] = decode(value)
        elif family == "upa":
            h.updates_applied.setdefault(rest.split("#", 1)[0], []).append(decode(value))
        elif family == "upr":
            h.update_responses[keys.dec(rest)] = decode(value)
        elif family == "ver":
            h.versions[keys.dec(rest)] = decode(value)["v"]
        elif family == "asyncres":
            h.async_results[rest] = decode(value)
        elif family == "actrec":
            h.started[rest] = decode(value)
    if state_bytes is None:
        return None
    h.state, h.state_bytes = WorkflowState.from_bytes(state_bytes), state_bytes
    return h


_PLACEHOLDER = WorkflowState("", "", "", "", b"", 0.0, 0.0)
