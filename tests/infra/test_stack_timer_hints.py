"""Timer hints in the construct (ADR 0054): an encrypted hint queue with a dead-letter queue
and an alarm on it, the timer worker on an SQS mapping with no batching window and partial
batch failures, the queue's URL in every engine function, and sends granted to each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from weft_serverless.aws.runtime import TIMER_HINTS_ENV

if TYPE_CHECKING:
    from conftest import Synthesis


@pytest.mark.parametrize("variant", ["default", "custom", "http"])
def test_the_hint_queue_worker_and_mapping_exist(synthesis: Synthesis, variant: str) -> None:
    synth = getattr(synthesis, variant)
    hints = synth.weft.timer_hints
    assert hints is not None
    queue_id, dlq_id = synth.id(hints.queue), synth.id(hints.dead_letter_queue)
    queue = synth.resources[queue_id]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}
    assert queue["VisibilityTimeout"] == 360
    worker_id = synth.id(hints.worker.function)
    worker = synth.resources[worker_id]["Properties"]
    assert worker["Handler"] == "handlers.timers.handler"
    [mapping] = synth.of_type("AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert props["FunctionName"] == {"Ref": worker_id}
    assert props["BatchSize"] == 10
    assert props.get("MaximumBatchingWindowInSeconds", 0) == 0
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert "TimerHintDeadLetters" in synth.weft.alarms


@pytest.mark.parametrize("variant", ["default", "custom", "http"])
def test_every_engine_function_knows_the_queue_and_may_send_to_it(
    synthesis: Synthesis, variant: str
) -> None:
    synth = getattr(synthesis, variant)
    weft = synth.weft
    queue_url = {"Ref": synth.id(weft.timer_hints.queue)}
    queue_arn = {"Fn::GetAtt": [synth.id(weft.timer_hints.queue), "Arn"]}
    for fn in (weft.api_handler, weft.maintenance_handler, weft.timer_hints.worker):
        props = synth.resources[synth.id(fn.function)]["Properties"]
        assert props["Environment"]["Variables"][TIMER_HINTS_ENV] == queue_url
        assert _sends(synth, fn.role, queue_arn), fn.function.node.path


def _sends(synth: Any, role: Any, queue_arn: dict[str, Any]) -> bool:
    role_id = synth.id(role)
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            actions = actions if isinstance(actions, list) else [actions]
            resources = statement["Resource"]
            resources = resources if isinstance(resources, list) else [resources]
            if "sqs:SendMessage" in actions and queue_arn in resources:
                return True
    return False
