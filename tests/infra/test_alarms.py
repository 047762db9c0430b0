"""CloudWatch alarms: one per signal that means workflows stop moving, each notifying a topic.

A count alarm fires when its threshold is reached in M of the last N periods (2 of 3 by
default), so one stray error does not page anybody. Five alarms watch the engine's own EMF
metrics, whose names and dimensions are checked against the runtime's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from weft_serverless.aws import maintenance as maintenance_module
from weft_serverless.aws.metrics import CORE_COUNTERS, HANDLER_DIMENSION, metric_name

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
    summed: bool = False  # the sum of the api, maintenance and timer worker handlers' series
    at_once: bool = False  # fires on the first bad period (1 of 1), not M of N


class Variant(NamedTuple):
    period: int
    stall: int
    evaluation: tuple[int, int]  # (evaluation periods, datapoints to alarm)
    limits: dict[str, int]
    namespace: str
    service: str


VARIANTS = {
    "default": Variant(
        300,
        300,
        (3, 2),
        {"api": 5, "5xx": 5, "throttles": 5, "maintenance": 2, "dlq": 1}
        # late: 2 x the 1-min rate + 30 s
        | {"failed": 5, "lost": 5, "late": 150, "dead": 1, "dead_events": 1},
        "Weft",
        "weft",
    ),
    # 15-minute periods; a 10-minute rate stalls after 2 missed ticks: 20 minutes
    "custom": Variant(
        900,
        1200,
        (4, 3),
        {"api": 5, "5xx": 6, "throttles": 7, "maintenance": 2, "dlq": 3}
        | {"failed": 8, "lost": 9, "late": 900, "dead": 2, "dead_events": 3},
        "Shop",
        "shop",
    ),
    "http": Variant(
        300,
        300,
        (3, 2),
        {"api": 5, "5xx": 5, "throttles": 5, "maintenance": 2, "dlq": 1}
        | {"failed": 5, "lost": 5, "late": 150, "dead": 1, "dead_events": 1},
        "Weft",
        "weft",
    ),
}


def _alarms(synth: Synth, v: Variant) -> dict[str, Alarm]:
    weft, period, limits = synth.weft, v.period, v.limits
    api_fn = [{"Name": "FunctionName", "Value": ref(synth.id(weft.api_handler.function))}]
    maint = [{"Name": "FunctionName", "Value": ref(synth.id(weft.maintenance_handler.function))}]
    if weft.rest_api is not None:
        api = [{"Name": "ApiName", "Value": synth.props(weft.rest_api)["Name"]}]
    else:
        api = [
            {"Name": "ApiId", "Value": ref(synth.id(weft.http_api))},
            {"Name": "Stage", "Value": "v1"},
        ]
    queue = [{"Name": "QueueName", "Value": arn(synth.id(weft.dead_letter_queue), "QueueName")}]
    engine = [
        {"Name": HANDLER_DIMENSION, "Value": "maintenance"},
        {"Name": "service", "Value": v.service},
    ]
    lam, gw, ns = "AWS/Lambda", "AWS/ApiGateway", v.namespace
    return {
        "ApiErrors": Alarm("Errors", lam, api_fn, "Sum", period, limits["api"]),
        "ApiServerErrors": Alarm(
            "5XXError" if weft.rest_api is not None else "5xx",
            gw,
            api,
            "Sum",
            period,
            limits["5xx"],
        ),
        "ApiThrottles": Alarm("Throttles", lam, api_fn, "Sum", period, limits["throttles"]),
        "MaintenanceErrors": Alarm("Errors", lam, maint, "Sum", period, limits["maintenance"]),
        "MaintenanceThrottles": Alarm("Throttles", lam, maint, "Sum", period, limits["throttles"]),
        "MaintenanceStalled": Alarm("Invocations", lam, maint, "Sum", v.stall, 1, below=True),
        "DeadLetters": Alarm(
            "ApproximateNumberOfMessagesVisible", "AWS/SQS", queue, "Maximum", period, limits["dlq"]
        ),
        "TimerHintDeadLetters": Alarm(
            "ApproximateNumberOfMessagesVisible",
            "AWS/SQS",
            [
                {
                    "Name": "QueueName",
                    "Value": arn(synth.id(weft.timer_hints.dead_letter_queue), "QueueName"),
                }
            ],
            "Maximum",
            period,
            limits["dlq"],
        ),
        "WorkflowsFailed": Alarm(
            "WorkflowsFailed", ns, [], "Sum", period, limits["failed"], summed=True
        ),
        "LostCommits": Alarm("LostCommits", ns, [], "Sum", period, limits["lost"], summed=True),
        "TimerLateness": Alarm("TimerLatenessMax", ns, engine, "Maximum", period, limits["late"]),
        "FinalizersDeadLettered": Alarm(
            "FinalizersDeadLettered",
            ns,
            [],
            "Sum",
            period,
            limits["dead"],
            summed=True,
            at_once=True,
        ),
        "EventsDeadLettered": Alarm(
            "EventsDeadLettered",
            ns,
            [],
            "Sum",
            period,
            limits["dead_events"],
            summed=True,
            at_once=True,
        ),
    }


def _summed(alarm: Alarm, service: str) -> list[dict[str, Any]]:
    def series(handler: str) -> dict[str, Any]:
        dimensions = [
            {"Name": HANDLER_DIMENSION, "Value": handler},
            {"Name": "service", "Value": service},
        ]
        return {
            "Id": handler,
            "MetricStat": {
                "Metric": {
                    "Dimensions": dimensions,
                    "MetricName": alarm.metric,
                    "Namespace": alarm.namespace,
                },
                "Period": alarm.period,
                "Stat": alarm.statistic,
            },
            "ReturnData": False,
        }

    expression = {
        "Expression": "FILL(api, 0) + FILL(maintenance, 0) + FILL(timers, 0)",
        "Id": "expr_1",
        "Label": alarm.metric,
        "ReturnData": True,
    }
    return [expression, series("api"), series("maintenance"), series("timers")]


@pytest.mark.parametrize("variant", ["default", "custom", "http"])
def test_alarms(synthesis: Synthesis, variant: str) -> None:
    synth: Synth = getattr(synthesis, variant)
    v = VARIANTS[variant]
    expected = _alarms(synth, v)
    topic = ALARM_TOPIC_ARN if variant == "custom" else ref(synth.id(synth.weft.alarm_topic))
    assert set(synth.weft.alarms) == set(expected)
    synth.template.resource_count_is("AWS::CloudWatch::Alarm", len(expected))
    for alarm_id, alarm in expected.items():
        props = dict(synth.props(synth.weft.alarms[alarm_id]))
        assert len(props.pop("AlarmDescription")) >= 30, alarm_id
        evaluation, datapoints = (1, 1) if alarm.below or alarm.at_once else v.evaluation
        wanted: dict[str, Any] = {
            "AlarmActions": [topic],
            "ComparisonOperator": "LessThanThreshold"
            if alarm.below
            else "GreaterThanOrEqualToThreshold",
            "DatapointsToAlarm": datapoints,
            "EvaluationPeriods": evaluation,
            "Threshold": alarm.threshold,
            "TreatMissingData": "breaching" if alarm.below else "notBreaching",
        }
        if alarm.summed:
            wanted["Metrics"] = _summed(alarm, v.service)
        else:
            wanted |= {
                "Dimensions": alarm.dimensions,
                "MetricName": alarm.metric,
                "Namespace": alarm.namespace,
                "Period": alarm.period,
                "Statistic": alarm.statistic,
            }
        assert props == wanted, alarm_id


def test_engine_alarms_watch_metrics_the_runtime_emits() -> None:
    emitted = {name for name, _ in CORE_COUNTERS}
    assert {"WorkflowsFailed", "LostCommits"} <= emitted
    source = Path(maintenance_module.__file__).read_text(encoding="utf-8")
    assert 'observe_max("TimerLatenessMax"' in source
    # the engine's counter, in EMF under its CamelCase name (tests/aws/test_aws_tracing.py
    # proves a dead-lettered finalizer emits it)
    assert metric_name("finalizers_dead_lettered") == "FinalizersDeadLettered"
    # tests/features/test_events_dead_letters.py proves a dead-lettered event emits this one
    assert metric_name("events_dead_lettered") == "EventsDeadLettered"


def test_a_topic_is_created_when_none_is_given_and_mail_subscribes_to_it(
    synthesis: Synthesis,
) -> None:
    from aws_cdk.assertions import Match

    default, http = synthesis.default, synthesis.http
    default.template.resource_count_is("AWS::SNS::Topic", 1)
    default.template.resource_count_is("AWS::SNS::Subscription", 0)
    synthesis.custom.template.resource_count_is("AWS::SNS::Topic", 0)  # it passed its own
    http.template.has_resource_properties(
        "AWS::SNS::Subscription",
        Match.object_equals(
            {
                "Endpoint": "ops@example.com",
                "Protocol": "email",
                "TopicArn": ref(http.id(http.weft.alarm_topic)),
            }
        ),
    )
    default.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": [
                    Match.object_like(
                        {
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            "Effect": "Deny",
                        }
                    )
                ]
            }
        },
    )
