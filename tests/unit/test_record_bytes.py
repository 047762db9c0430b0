"""The stored bytes of each typed record are the wire format: pinned here, key by key.

Each hex literal is what the engine stored before the records had classes (the same map,
keys in the same order, optional keys left out when unset). A change to any of them is a
change of the persisted format and needs a schema version and a fixture (ADR 0014).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from weft_serverless.codec import decode, encode
from weft_serverless.engine.persistence.stored_records import (
    AttemptRecord,
    OpRecord,
    PendingRecord,
    SignalRecord,
    TimerRecord,
    UpdateRecord,
    UpdateResponse,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "store_v1.json"
AT = 1767225601.5
ERR = {"kind": "activity", "type": "ValueError", "message": "no", "activity": "a", "attempts": 3}
RETRY_TIMER = ["timers#01", "0001767225605000#w1#r00000000#2"]
SIGNAL_TIMER = ["timers#03", "0001767225607000#w1#g0000001767225607000.00000000.abcdef"]

Record = (
    OpRecord
    | AttemptRecord
    | PendingRecord
    | SignalRecord
    | UpdateRecord
    | UpdateResponse
    | TimerRecord
)

PINNED: list[tuple[str, Record, str]] = [
    (
        "op: an activity's result, on a head commit after a retry of the run",
        OpRecord.holding(encode({"paid": 7}), attempt=2).committed("run:charge", AT, 1, 3),
        "86a3736967aa72756e3a636861726765a26174cb41da556e40600000a176c40781a47061696407a16102"
        "a17201a2666503",
    ),
    (
        "op: a result stored as nil",
        OpRecord.holding(None, attempt=1).committed("run:noop", AT, None, None),
        "84a3736967a872756e3a6e6f6f70a26174cb41da556e40600000a176c0a16101",
    ),
    (
        "op: a race whose first branch failed",
        OpRecord(ok=False, index=0, error=ERR).committed(
            "race(run:a,sleep)", 1767225602.0, None, None
        ),
        "85a3736967b1726163652872756e3a612c736c65657029a26174cb41da556e40800000a26f6bc2a16900"
        "a365727285a46b696e64a86163746976697479a474797065aa56616c75654572726f72a76d657373616765"
        "a26e6fa86163746976697479a161a8617474656d70747303",
    ),
    (
        "op: a race a branch won",
        OpRecord.holding(encode(None), index=1).committed(
            "race(signal:go,sleep)", 1767225602.0, None, None
        ),
        "84a3736967b572616365287369676e616c3a676f2c736c65657029a26174cb41da556e40800000a16901"
        "a176c401c0",
    ),
    (
        "op: an all of two branches",
        OpRecord(count=2).committed("all(run:a,run:b)", 1767225603.0, None, None),
        "83a3736967b0616c6c2872756e3a612c72756e3a6229a26174cb41da556e40c00000a16e02",
    ),
    (
        "op: a value verify() reconciled",
        OpRecord.holding(encode("ok"), reconciled=True).committed(
            "run:pay", 1767225604.0, None, None
        ),
        "84a3736967a772756e3a706179a26174cb41da556e41000000a176c403a26f6baa7265636f6e63696c6564c3",
    ),
    (
        "op: a sleep",
        OpRecord().committed("sleep", 1767225605.0, None, None),
        "82a3736967a5736c656570a26174cb41da556e41400000",
    ),
    (
        "op: a reference to a large record's blob",
        OpRecord(reference="0123456789abcdef0123456789abcdef", fence_epoch=2),
        "82a3726566d9203031323334353637383961626364656630313233343536373839616263646566a2666502",
    ),
    (
        "op: a tombstone",
        OpRecord(tombstone=True, fence_epoch=4),
        "82a4746f6d62c3a2666504",
    ),
    (
        "attempt: every field",
        AttemptRecord(
            2,
            "ValueError",
            "no luck",
            1767225601.0,
            "Traceback ...",
            1767225600.5,
            1767225600.0,
            encode({"beat": 2}),
            "run:flaky",
            1767225605.0,
            RETRY_TIMER,
        ),
        "8ba16e02a474797065aa56616c75654572726f72a76d657373616765a76e6f206c75636ba26174cb41da55"
        "6e40400000a27462ad54726163656261636b202e2e2ea173cb41da556e40200000a56669727374cb41da55"
        "6e40000000a26862c40781a46265617402a3736967a972756e3a666c616b79a3647565cb41da556e414000"
        "00a574696d657292a974696d657273233031bf303030313736373232353630353030302377312372303030"
        "30303030302332",
    ),
    (
        "attempt: no traceback, start or heartbeat",
        AttemptRecord(1, "RuntimeError", "broken", 1767225601.0, first_at=1767225600.0).parked(
            "run:f", 1767225602.0, ["timers#01", "0001767225602000#w1#r00000000#1"]
        ),
        "88a16e01a474797065ac52756e74696d654572726f72a76d657373616765a662726f6b656ea26174cb41da"
        "556e40400000a56669727374cb41da556e40000000a3736967a572756e3a66a3647565cb41da556e408000"
        "00a574696d657292a974696d657273233031bf303030313736373232353630323030302377312372303030"
        "30303030302331",
    ),
    (
        "pending: a timer",
        PendingRecord().parked(
            "sleep", 1767229200.0, ["timers#02", "0001767229200000#w1#s00000003"]
        ),
        "83a3736967a5736c656570a3647565cb41da5571c4000000a574696d657292a974696d657273233032bd30"
        "30303137363732323932303030303023773123733030303030303033",
    ),
    (
        "pending: a child",
        PendingRecord(child_id="w1-kid", policy="await", signature="child:child"),
        "83a86368696c645f6964a677312d6b6964a6706f6c696379a56177616974a3736967ab6368696c643a6368"
        "696c64",
    ),
    (
        "pending: an async attempt",
        PendingRecord(async_attempt=1, at=1767225606.0),
        "82a56173796e6301a26174cb41da556e41800000",
    ),
    (
        "signal: with an id",
        SignalRecord(encode({"by": "ops"}), "s-1", 1767225607.0, SIGNAL_TIMER),
        "84a176c40881a26279a36f7073a26964a3732d31a26174cb41da556e41c00000a574696d657292a974696d"
        "657273233033d938303030313736373232353630373030302377312367303030303030313736373232353630"
        "373030302e30303030303030302e616263646566",
    ),
    (
        "signal: without an id (stored as nil)",
        SignalRecord(encode("late"), None, 1767225607.0, SIGNAL_TIMER),
        "84a176c405a46c617465a26964c0a26174cb41da556e41c00000a574696d657292a974696d657273233033"
        "d938303030313736373232353630373030302377312367303030303030313736373232353630373030302e"
        "30303030303030302e616263646566",
    ),
    (
        "update applied",
        UpdateRecord("u-1", "note", encode("first"), 1767225608.0),
        "84a26964a3752d31a46e616d65a46e6f7465a77061796c6f6164c406a56669727374a26174cb41da556e42"
        "000000",
    ),
    (
        "update response",
        UpdateResponse(encode(1), "note", 1767225608.0),
        "83a176c40101a46e616d65a46e6f7465a26174cb41da556e42000000",
    ),
    ("timer", TimerRecord("w1", "sleep"), "82a27766a27731a46b696e64a5736c656570"),
    (
        "timer: retained by three passes",
        TimerRecord("w1", "retry", 3),
        "83a27766a27731a46b696e64a57265747279a16e03",
    ),
]


@pytest.mark.parametrize(("what", "record", "stored"), PINNED, ids=[p[0] for p in PINNED])
def test_each_record_has_the_bytes_stored_before_it_had_a_class(
    what: str, record: Record, stored: str
) -> None:
    assert record.to_bytes().hex() == stored, what
    assert type(record).from_bytes(bytes.fromhex(stored)) == record


OP_FIELDS = (
    "signature",
    "at",
    "ok",
    "index",
    "value",
    "has_value",
    "attempt",
    "reconciled",
    "error",
    "count",
    "retries",
    "reference",
    "tombstone",
    "fence_epoch",
)


def _named(record: Record) -> tuple[Any, ...]:
    """What a reader sees of a record: its named fields."""
    if isinstance(record, OpRecord):
        return tuple(getattr(record, name) for name in OP_FIELDS)
    return dataclasses.astuple(record)


def test_a_key_a_newer_release_adds_is_ignored_on_read() -> None:
    """As before the classes: readers took the keys they knew and left the rest."""
    for _, record, stored in PINNED:
        raw: dict[str, Any] = decode(bytes.fromhex(stored))
        newer = type(record).from_bytes(encode({**raw, "zz": [1, 2]}))
        assert _named(newer) == _named(record)
        assert not isinstance(newer, OpRecord) or newer.kept() == record.kept()


def test_a_step_a_retry_sets_aside_keeps_its_outcome_not_its_value() -> None:
    """The retry record keeps a subset of each forgotten op record, in this key order."""
    record = OpRecord(ok=False, index=1, error=ERR, attempt=2)
    committed = record.committed("run:a", AT, 1, 3)
    assert list(committed.kept()) == ["sig", "at", "ok", "err", "a", "r", "i"]
    assert OpRecord.holding(encode(5)).committed("run:b", AT, None, 2).kept() == {
        "sig": "run:b",
        "at": AT,
    }


CLASS_OF_FAMILY: dict[str, type[Record]] = {
    "op": OpRecord,
    "att": AttemptRecord,
    "pend": PendingRecord,
    "sig": SignalRecord,
    "upa": UpdateRecord,
    "upr": UpdateResponse,
}


def test_the_records_release_1_stored_read_and_write_back_byte_for_byte() -> None:
    """Every typed record in the v1 fixture (tests/fixtures/test_persisted_format.py resumes
    it) comes back to the very bytes that release stored."""
    rows = json.loads(FIXTURE.read_text())["rows"]
    seen: set[str] = set()
    for row in rows:
        value = bytes.fromhex(row["value"])
        family = row["sort"].split("#", 1)[0]
        cls = TimerRecord if row["partition"].startswith("timers#") else CLASS_OF_FAMILY.get(family)
        if cls is None:
            continue
        seen.add(cls.__name__)
        assert cls.from_bytes(value).to_bytes() == value, (row["partition"], row["sort"])
    assert seen == {c.__name__ for c in (*CLASS_OF_FAMILY.values(), TimerRecord)} - {
        "AttemptRecord"
    }
