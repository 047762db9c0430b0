"""Hint ports (ADR 0054): the SQS message a hint becomes, and what a worker accepts back."""

from __future__ import annotations

from typing import Any

import pytest

from weft_serverless import InvalidArgumentError, SqsTimerHints, TimerHint
from weft_serverless.hint_ports import hint_body, hint_from_body
from weft_serverless.storage import keys
from weft_serverless.storage.keys.shards import DEFAULT_SHARDS

NOW = 1_767_225_600.0


class Client:
    def __init__(self, failed: int = 0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.failed = failed

    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"Failed": [{"Id": "0"}] * self.failed}


def _hint(due: float, workflow_id: str = "run#1/é") -> TimerHint:
    return TimerHint.of(keys.timer_key(DEFAULT_SHARDS, due, workflow_id, "s00000001"))


def test_each_hint_is_delayed_to_its_due_second_within_sqs_bounds() -> None:
    client = Client()
    port = SqsTimerHints("https://sqs/q", client=client, clock=lambda: NOW)
    port.send([_hint(NOW + 5.7), _hint(NOW - 3.0), _hint(NOW + 5000.0)])
    [call] = client.calls
    assert call["QueueUrl"] == "https://sqs/q"
    assert [entry["DelaySeconds"] for entry in call["Entries"]] == [5, 0, 900]
    assert [entry["Id"] for entry in call["Entries"]] == ["0", "1", "2"]


def test_a_partly_refused_batch_raises_so_the_engine_counts_it() -> None:
    port = SqsTimerHints("https://sqs/q", client=Client(failed=1), clock=lambda: NOW)
    with pytest.raises(ConnectionError):
        port.send([_hint(NOW + 1.0)])


def test_a_body_round_trips_to_the_same_hint_and_names_only_the_key() -> None:
    hint = _hint(NOW + 2.5)
    body = hint_body(hint)
    assert "run" not in body.split('"s"')[0]  # the id travels inside the key only
    assert hint_from_body(body) == hint
    assert hint.workflow_id == "run#1/é" and hint.due == NOW + 2.5


@pytest.mark.parametrize(
    "body",
    ["", "[]", '{"p": "timers#00"}', '{"p": "wf#x", "s": "1#a#b"}', '{"p": 1, "s": "x"}'],
)
def test_a_body_that_names_no_timer_key_is_refused(body: str) -> None:
    with pytest.raises(InvalidArgumentError):
        hint_from_body(body)
