"""``WeftServerless``: the whole engine topology on one DynamoDB table.

Table, API function behind an IAM-authenticated REST API, maintenance function on an
EventBridge schedule, a dead-letter queue for failed asynchronous invocations, alarms and
outputs. Decisions are recorded in ``docs/decisions/0007-cdk-construct.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

from aws_cdk import CfnOutput, Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from weft_serverless_infra import _nag, names
from weft_serverless_infra.alarms import AlarmThresholds, WeftAlarms
from weft_serverless_infra.api import WeftApi
from weft_serverless_infra.functions import WeftFunction

_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_API_GATEWAY_TIMEOUT = Duration.seconds(29)


class WeftServerless(Construct):
    """Deploys the weft-serverless engine for one set of workflows.

    Args:
        scope: Parent construct, usually a ``Stack``.
        construct_id: Construct id.
        workflows_module: Dotted module, inside the asset, exporting a ``workflows`` dict.
        code_path: Plain folder holding ``weft_serverless``, ``handlers``, the workflows
            package and the dependencies; ``infra/build_asset.py`` builds it. No Docker.
        maintenance_rate: How often EventBridge runs maintenance (timers, claim renewal).
        maintenance_timeout: Must be shorter than the rate, so runs never overlap.
        api_timeout: At most 29 s, API Gateway's integration timeout, so the engine's time
            budget (read from the Lambda context) ends before the caller gives up.
        maintenance_reserved_concurrency: 1 keeps sweeps serial; None leaves it unreserved
            (for accounts whose concurrency quota cannot spare a reservation).
        log_retention: Retention of the function and access log groups.
        removal_policy: Applies to the table, queue and log groups.
        deletion_protection: DynamoDB deletion protection on the table.
        alarm_thresholds: Counts at which each alarm fires.
        alarm_topic: If given, every alarm notifies it.
        offload_bucket: If given, large values may be offloaded there (``WEFT_OFFLOAD_BUCKET``).
        offload_prefix: Object key prefix the functions may read and write in that bucket;
            must match the storage adapter's ``offload_prefix``.
        web_acl_arn: If given, the WAFv2 web ACL is associated with the API stage.
        api_cloudwatch_role: Create API Gateway's account-wide CloudWatch role; pass False
            when the account already has one.

    Attributes:
        table: The engine's DynamoDB table.
        api_handler: API function with its role and log group.
        maintenance_handler: Maintenance function with its role and log group.
        dead_letter_queue: Receives failed asynchronous invocations and schedule deliveries.
        schedule: EventBridge rule that runs maintenance.
        rest_api: The REST API; ``grant_invoke`` lets a principal call it.
        access_logs: Log group of the API's access log.
        alarms: CloudWatch alarms by id.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workflows_module: str,
        code_path: str,
        maintenance_rate: Duration | None = None,
        maintenance_timeout: Duration | None = None,
        maintenance_memory_mb: int = 256,
        maintenance_reserved_concurrency: int | None = 1,
        api_timeout: Duration | None = None,
        api_memory_mb: int = 512,
        stage_name: str = "v1",
        service_name: str = "weft",
        metrics_namespace: str = "Weft",
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        deletion_protection: bool = True,
        alarm_thresholds: AlarmThresholds | None = None,
        alarm_topic: sns.ITopic | None = None,
        offload_bucket: s3.IBucket | None = None,
        offload_prefix: str = names.OFFLOAD_PREFIX,
        web_acl_arn: str | None = None,
        api_cloudwatch_role: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        rate = maintenance_rate or Duration.minutes(1)
        maintenance_timeout = maintenance_timeout or Duration.seconds(55)
        api_timeout = api_timeout or _API_GATEWAY_TIMEOUT
        _check_settings(workflows_module, code_path, rate, maintenance_timeout, api_timeout)

        self.table = dynamodb.TableV2(
            self,
            "Table",
            partition_key=dynamodb.Attribute(
                name=names.PARTITION_KEY, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=names.SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=deletion_protection,
            time_to_live_attribute=names.TTL_ATTRIBUTE,
            removal_policy=removal_policy,
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal_policy,
        )
        environment = {
            names.TABLE_NAME_ENV: self.table.table_name,
            names.WORKFLOWS_MODULE_ENV: workflows_module,
            names.OWNERSHIP_ENV: names.OWNERSHIP,
            "POWERTOOLS_SERVICE_NAME": service_name,
            "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
        }
        if offload_bucket is not None:
            environment[names.OFFLOAD_BUCKET_ENV] = offload_bucket.bucket_name
        code = lambda_.Code.from_asset(code_path)
        self.api_handler = api_fn = WeftFunction(
            self,
            "ApiHandler",
            code=code,
            handler=names.API_HANDLER,
            description="weft-serverless API handler",
            environment=environment,
            memory_mb=api_memory_mb,
            timeout=api_timeout,
            dead_letter_queue=self.dead_letter_queue,
            log_retention=log_retention,
            removal_policy=removal_policy,
        )
        self.maintenance_handler = maintenance_fn = WeftFunction(
            self,
            "MaintenanceHandler",
            code=code,
            handler=names.MAINTENANCE_HANDLER,
            description="weft-serverless maintenance (timers, claims, retention)",
            environment=environment,
            memory_mb=maintenance_memory_mb,
            timeout=maintenance_timeout,
            dead_letter_queue=self.dead_letter_queue,
            log_retention=log_retention,
            removal_policy=removal_policy,
            reserved_concurrency=maintenance_reserved_concurrency,
            retry_attempts=0,
            max_event_age=_event_age(rate),
        )
        for fn in (api_fn, maintenance_fn):
            fn.grant_table(self.table)
            if offload_bucket is not None:
                fn.grant_offload(offload_bucket, offload_prefix)

        self.schedule = events.Rule(
            self,
            "MaintenanceSchedule",
            description="Runs weft-serverless maintenance",
            schedule=events.Schedule.rate(rate),
            targets=[
                targets.LambdaFunction(
                    maintenance_fn.function,
                    dead_letter_queue=self.dead_letter_queue,
                    retry_attempts=2,
                    max_event_age=_event_age(rate),
                )
            ],
        )
        api = WeftApi(
            self,
            "Http",
            handler=api_fn.function,
            stage_name=stage_name,
            log_retention=log_retention,
            removal_policy=removal_policy,
            cloudwatch_role=api_cloudwatch_role,
            web_acl_arn=web_acl_arn,
        )
        self.rest_api = api.rest_api
        self.access_logs = api.access_logs
        self.alarms = WeftAlarms(
            self,
            "Alarms",
            thresholds=alarm_thresholds or AlarmThresholds(),
            api_function=api_fn.function,
            maintenance_function=maintenance_fn.function,
            maintenance_rate=rate,
            rest_api=self.rest_api,
            dead_letter_queue=self.dead_letter_queue,
            topic=alarm_topic,
        ).alarms
        CfnOutput(self, "ApiUrl", value=self.rest_api.url, description="Base URL of the API")
        CfnOutput(self, "TableName", value=self.table.table_name, description="Engine table")
        CfnOutput(
            self,
            "DeadLetterQueueUrl",
            value=self.dead_letter_queue.queue_url,
            description="Failed asynchronous invocations, for inspection and redrive",
        )

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` call every route of the deployed stage (``execute-api:Invoke``).

        The ARN ends in ``/*/*`` (any method, any path), so when ``grantee`` is a construct
        the matching cdk-nag finding is acknowledged on it.
        """
        stage = self.rest_api.deployment_stage.stage_name
        resource = self.rest_api.arn_for_execute_api(method="*", path="/*", stage=stage)
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["execute-api:Invoke"], resource_arns=[resource]
        )
        if isinstance(grantee, Construct):
            _nag.acknowledge(
                grantee,
                _nag.wildcard_resource_rule(self, resource),
                "The caller may use every route of this one API stage; which workflows it may "
                "touch is the API's concern, not IAM's.",
            )
        return grant


def _event_age(rate: Duration) -> Duration:
    """A tick older than one period is superseded by the next; Lambda's range is 1 min-6 h."""
    return Duration.seconds(min(max(int(rate.to_seconds()), 60), 6 * 3600))


def _check_settings(
    workflows_module: str,
    code_path: str,
    rate: Duration,
    maintenance_timeout: Duration,
    api_timeout: Duration,
) -> None:
    """Fail at synth, with the fix, on settings that would deploy a broken engine."""
    problems = []
    if not _MODULE_PATH.match(workflows_module):
        problems.append(f"workflows_module {workflows_module!r} is not a dotted module path")
    root = Path(code_path)
    required = [_module_file(names.API_HANDLER), _module_file(names.MAINTENANCE_HANDLER)]
    required.append("weft_serverless/__init__.py")
    missing = [path for path in required if not (root / path).is_file()]
    top = workflows_module.split(".")[0]
    if not ((root / top).is_dir() or (root / f"{top}.py").is_file()):
        missing.append(f"{top}/ (the workflows package)")
    if missing:
        problems.append(
            f"code_path {code_path!r} lacks {', '.join(missing)}; "
            "build it with: python infra/build_asset.py"
        )
    if maintenance_timeout.to_seconds() >= rate.to_seconds():
        problems.append("maintenance_timeout must be shorter than maintenance_rate")
    if api_timeout.to_seconds() > _API_GATEWAY_TIMEOUT.to_seconds():
        problems.append("api_timeout must be at most 29 s, API Gateway's integration timeout")
    if problems:
        raise ValueError("WeftServerless: " + "; ".join(problems))


def _module_file(handler: str) -> str:
    """``handlers.api.handler`` -> ``handlers/api.py``."""
    return "/".join(handler.split(".")[:-1]) + ".py"
