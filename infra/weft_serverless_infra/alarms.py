"""CloudWatch alarms for the engine: the few signals that mean workflows stop moving.

Each count alarm fires only when its threshold is reached in ``datapoints_to_alarm`` of the
last ``evaluation_periods`` periods (2 of 3 five-minute periods by default), so one stray
error or a single throttled burst does not page anybody; a problem that lasts does. Besides
the AWS service metrics, five alarms watch the engine's own EMF metrics (failed runs, lost
commits, timer lateness, dead-lettered finalizers and events), which no AWS metric can see.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

_AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD


@dataclass(frozen=True)
class AlarmThresholds:
    """Counts per period at which a period counts as bad, and how many bad periods alarm.

    Attributes:
        period_minutes: Length of one evaluation period.
        evaluation_periods: How many recent periods an alarm looks at.
        datapoints_to_alarm: How many of them must be bad for it to fire.
        api_errors: Unhandled errors of the API function.
        api_server_errors: 5XX responses returned by API Gateway.
        throttles: Throttled invocations, per function.
        maintenance_errors: Failed maintenance runs (one runs a minute by default).
        dlq_messages: Messages waiting in the dead-letter queue.
        workflows_failed: Runs that ended ``failed`` (the engine's ``WorkflowsFailed``).
        lost_commits: Commits refused by a fence (``LostCommits``): ownership is contested.
        timer_lateness_seconds: Worst lateness of a fired timer (``TimerLatenessMax``);
            None means twice the maintenance rate plus 30 s.
        finalizers_dead_lettered: Finalizers that exhausted their retries
            (``FinalizersDeadLettered``); each one is cleanup that never happened, so this
            alarm fires on the first period that reaches it, not M of N.
        events_dead_lettered: Events the event sink kept refusing, moved out of the
            outbox (``EventsDeadLettered``); each one is an event no consumer will see, so
            this alarm too fires on the first period that reaches it.
    """

    period_minutes: int = 5
    evaluation_periods: int = 3
    datapoints_to_alarm: int = 2
    api_errors: int = 5
    api_server_errors: int = 5
    throttles: int = 5
    maintenance_errors: int = 2
    dlq_messages: int = 1
    workflows_failed: int = 5
    lost_commits: int = 5
    timer_lateness_seconds: int | None = None
    finalizers_dead_lettered: int = 1
    events_dead_lettered: int = 1


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
        api_server_errors: cloudwatch.Metric,
        dead_letter_queue: sqs.IQueue,
        hint_dead_letter_queue: sqs.IQueue | None = None,
        topic: sns.ITopic,
        metrics_namespace: str,
        service_name: str,
    ) -> None:
        super().__init__(scope, construct_id)
        t = self._thresholds = thresholds
        period = Duration.minutes(t.period_minutes)
        rate_seconds = int(maintenance_rate.to_seconds())
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
            api_server_errors.with_(period=period, statistic="Sum"),
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
            "A maintenance worker was throttled: a tick found its previous run still going, "
            "or the reserved concurrency is below the workers per tick.",
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
        if hint_dead_letter_queue is not None:
            self._at_least(
                "TimerHintDeadLetters",
                hint_dead_letter_queue.metric_approximate_number_of_messages_visible(
                    period=period, statistic="Maximum"
                ),
                t.dlq_messages,
                "The timer worker kept failing on a hint; its timer still fires at the next "
                "maintenance pass. Inspect the worker's logs, then purge or redrive the queue.",
            )

        def engine_metric(name: str, handler: str, statistic: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace=metrics_namespace,
                metric_name=name,
                dimensions_map={"Handler": handler, "service": service_name},
                period=period,
                statistic=statistic,
            )

        handlers = (
            ("api", "maintenance", "timers") if hint_dead_letter_queue else ("api", "maintenance")
        )

        def both_handlers(name: str) -> cloudwatch.MathExpression:
            """The engine counts per handler; what matters is the sum over all of them (the
            timer worker drives runs too)."""
            return cloudwatch.MathExpression(
                expression=" + ".join(f"FILL({handler}, 0)" for handler in handlers),
                using_metrics={
                    handler: engine_metric(name, handler, "Sum") for handler in handlers
                },
                period=period,
                label=name,
            )

        self._at_least(
            "WorkflowsFailed",
            both_handlers("WorkflowsFailed"),
            t.workflows_failed,
            "Workflow runs are ending failed; `weft show <id>` on one tells which step and why.",
        )
        self._at_least(
            "LostCommits",
            both_handlers("LostCommits"),
            t.lost_commits,
            "Step commits are being refused by the ownership fence: containers are contesting "
            "workflows (clock skew, frozen containers, or a claim TTL shorter than steps).",
        )
        self._at_least(
            "TimerLateness",
            engine_metric("TimerLatenessMax", "maintenance", "Maximum"),
            t.timer_lateness_seconds
            if t.timer_lateness_seconds is not None
            else 2 * rate_seconds + 30,
            "Timers fire late: maintenance passes are slow or fall behind (see its duration "
            "and the TimersFired metric).",
        )
        self._add(
            "FinalizersDeadLettered",
            both_handlers("FinalizersDeadLettered"),
            threshold=t.finalizers_dead_lettered,
            comparison=_AT_LEAST,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING,  # emitted only when one happens
            description="A finalizer (ctx.on_cancel cleanup) exhausted its retries and was "
            "dead-lettered: its cleanup never ran. Engine.list_dead_letters() lists them.",
        )
        self._add(
            "EventsDeadLettered",
            both_handlers("EventsDeadLettered"),
            threshold=t.events_dead_lettered,
            comparison=_AT_LEAST,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING,  # emitted only when one happens
            description="The event bus kept refusing a run event, which was moved out of the "
            "outbox: no consumer will see it. Engine.list_event_dead_letters() lists them.",
        )
        for alarm in self.alarms.values():
            alarm.add_alarm_action(actions.SnsAction(topic))

    def _at_least(
        self,
        alarm_id: str,
        metric: cloudwatch.IMetric,
        threshold: int,
        description: str,
    ) -> None:
        self._add(
            alarm_id,
            metric,
            threshold=threshold,
            comparison=_AT_LEAST,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING,
            description=description,
            evaluation_periods=self._thresholds.evaluation_periods,
            datapoints_to_alarm=self._thresholds.datapoints_to_alarm,
        )

    def _add(
        self,
        alarm_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: int,
        comparison: cloudwatch.ComparisonOperator,
        missing: cloudwatch.TreatMissingData,
        description: str,
        evaluation_periods: int = 1,
        datapoints_to_alarm: int = 1,
    ) -> None:
        self.alarms[alarm_id] = cloudwatch.Alarm(
            self,
            alarm_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=datapoints_to_alarm,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=description,
        )
