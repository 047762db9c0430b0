"""CloudWatch alarms: one per signal that means workflows stop moving."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

if TYPE_CHECKING:
    from conftest import Synth, Synthesis

ALARM_TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:weft-alarms"


def ref(logical_id: str) -> dict[str, Any]:
    return {"Ref": logical_id}


def arn(logical_id: str, attribute: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, attribute]}


class Alarm(NamedTuple):
    metric: str
    namespace: str
    dimensions: list[dict[str, Any]]
    statistic: str
    period: int
    threshold: int
    below: bool = False  # "fires when under the threshold", and missing data counts as under


def _alarms(synth: Synth, period: int, stall: int, limits: dict[str, int]) -> dict[str, Alarm]:
    weft = synth.weft
    api_fn = [{"Name": "FunctionName", "Value": ref(synth.id(weft.api_handler.function))}]
    maint = [{"Name": "FunctionName", "Value": ref(synth.id(weft.maintenance_handler.function))}]
    api = [{"Name": "ApiName", "Value": synth.props(weft.rest_api)["Name"]}]
    queue = [{"Name": "QueueName", "Value": arn(synth.id(weft.dead_letter_queue), "QueueName")}]
    lam, gw = "AWS/Lambda", "AWS/ApiGateway"
    return {
        "ApiErrors": Alarm("Errors", lam, api_fn, "Sum", period, limits["api"]),
        "ApiServerErrors": Alarm("5XXError", gw, api, "Sum", period, limits["5xx"]),
        "ApiThrottles": Alarm("Throttles", lam, api_fn, "Sum", period, limits["throttles"]),
        "MaintenanceErrors": Alarm("Errors", lam, maint, "Sum", period, limits["maintenance"]),
        "MaintenanceThrottles": Alarm("Throttles", lam, maint, "Sum", period, limits["throttles"]),
        "MaintenanceStalled": Alarm("Invocations", lam, maint, "Sum", stall, 1, below=True),
        "DeadLetters": Alarm(
            "ApproximateNumberOfMessagesVisible", "AWS/SQS", queue, "Maximum", period, limits["dlq"]
        ),
    }


@pytest.mark.parametrize("variant", ["default", "custom"])
def test_alarms(synthesis: Synthesis, variant: str) -> None:
    synth: Synth = getattr(synthesis, variant)
    if variant == "default":
        limits = {"api": 1, "5xx": 1, "throttles": 1, "maintenance": 1, "dlq": 1}
        expected, actions = _alarms(synth, period=300, stall=300, limits=limits), None
    else:  # 15-minute periods; a 10-minute rate stalls after 2 missed ticks: 20 minutes
        limits = {"api": 5, "5xx": 6, "throttles": 7, "maintenance": 2, "dlq": 3}
        expected, actions = _alarms(synth, period=900, stall=1200, limits=limits), [ALARM_TOPIC_ARN]
    assert set(synth.weft.alarms) == set(expected)
    synth.template.resource_count_is("AWS::CloudWatch::Alarm", len(expected))
    for alarm_id, alarm in expected.items():
        props = dict(synth.props(synth.weft.alarms[alarm_id]))
        assert len(props.pop("AlarmDescription")) >= 30, alarm_id
        wanted: dict[str, Any] = {
            "ComparisonOperator": "LessThanThreshold"
            if alarm.below
            else "GreaterThanOrEqualToThreshold",
            "Dimensions": alarm.dimensions,
            "EvaluationPeriods": 1,
            "MetricName": alarm.metric,
            "Namespace": alarm.namespace,
            "Period": alarm.period,
            "Statistic": alarm.statistic,
            "Threshold": alarm.threshold,
            "TreatMissingData": "breaching" if alarm.below else "notBreaching",
        }
        if actions:
            wanted["AlarmActions"] = actions
        assert props == wanted, alarm_id
