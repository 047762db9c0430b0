"""The ``record`` step: a local computation whose value is stored once and replayed after."""

from __future__ import annotations

from weft_serverless.codec import decode
from weft_serverless.commands import Record
from weft_serverless.engine.persistence.outcomes import Done, Outcome, RaiseAtYield
from weft_serverless.engine.persistence.stored_records import OpRecord
from weft_serverless.engine.steps.scope import StepScope


def record(scope: StepScope, cmd: Record, slot: str) -> Done | None:
    try:
        value = cmd.compute()
        data = scope.rt.encode_payload(value, f"value of {cmd.name}")
    except Exception as exc:
        raise RaiseAtYield(exc) from None
    return Done(Outcome(decode(data)), OpRecord.holding(data))
