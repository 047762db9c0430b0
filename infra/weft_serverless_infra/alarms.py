"""CloudWatch alarms for the engine: the few signals that mean workflows stop moving."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

_AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD


@dataclass(frozen=True)
class AlarmThresholds:
    """Counts per evaluation period at which an alarm fires; 1 means "any".

    Attributes:
        period_minutes: Length of the one period each alarm evaluates.
        api_errors: Unhandled errors of the API function.
        api_server_errors: 5XX responses returned by API Gateway.
        throttles: Throttled invocations, per function.
        maintenance_errors: Failed maintenance runs.
        dlq_messages: Messages waiting in the dead-letter queue.
    """

    period_minutes: int = 5
    api_errors: int = 1
    api_server_errors: int = 1
    throttles: int = 1
    maintenance_errors: int = 1
    dlq_messages: int = 1


class WeftAlarms(Construct):
    """Alarms on errors, throttles, stalled maintenance and dead letters.

    Attributes:
        alarms: Every alarm created, by construct id.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        thresholds: AlarmThresholds,
        api_function: lambda_.IFunction,
        maintenance_function: lambda_.IFunction,
        maintenance_rate: Duration,
        rest_api: apigw.RestApi,
        dead_letter_queue: sqs.IQueue,
        topic: sns.ITopic | None,
    ) -> None:
        super().__init__(scope, construct_id)
        t = thresholds
        period = Duration.minutes(t.period_minutes)
        stall_minutes = max(t.period_minutes, 2 * int(maintenance_rate.to_minutes()))
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._at_least(
            "ApiErrors",
            api_function.metric_errors(period=period, statistic="Sum"),
            t.api_errors,
            "The API function raised unhandled errors; see its log group.",
        )
        self._at_least(
            "ApiServerErrors",
            rest_api.metric_server_error(period=period, statistic="Sum"),
            t.api_server_errors,
            "API Gateway returned 5XX responses (handler errors or integration timeouts).",
        )
        self._at_least(
            "ApiThrottles",
            api_function.metric_throttles(period=period, statistic="Sum"),
            t.throttles,
            "The API function was throttled: raise the account concurrency or its quota.",
        )
        self._at_least(
            "MaintenanceErrors",
            maintenance_function.metric_errors(period=period, statistic="Sum"),
            t.maintenance_errors,
            "A maintenance run failed: timers, claim renewals and takeovers are late.",
        )
        self._at_least(
            "MaintenanceThrottles",
            maintenance_function.metric_throttles(period=period, statistic="Sum"),
            t.throttles,
            "A maintenance tick found the previous run still going (reserved concurrency 1).",
        )
        self._add(
            "MaintenanceStalled",
            maintenance_function.metric_invocations(
                period=Duration.minutes(stall_minutes), statistic="Sum"
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cloudwatch.TreatMissingData.BREACHING,
            description="Maintenance did not run: no timer fires and no claim is renewed. "
            "Check the schedule rule and the function's concurrency.",
        )
        self._at_least(
            "DeadLetters",
            dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=period, statistic="Maximum"
            ),
            t.dlq_messages,
            "An asynchronous invocation failed for good; inspect and redrive the queue.",
        )
        if topic is not None:
            for alarm in self.alarms.values():
                alarm.add_alarm_action(actions.SnsAction(topic))

    def _at_least(
        self, alarm_id: str, metric: cloudwatch.Metric, threshold: int, description: str
    ) -> None:
        self._add(
            alarm_id,
            metric,
            threshold=threshold,
            comparison=_AT_LEAST,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING,
            description=description,
        )

    def _add(
        self,
        alarm_id: str,
        metric: cloudwatch.Metric,
        *,
        threshold: int,
        comparison: cloudwatch.ComparisonOperator,
        missing: cloudwatch.TreatMissingData,
        description: str,
    ) -> None:
        self.alarms[alarm_id] = metric.create_alarm(
            self,
            alarm_id,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=description,
        )
