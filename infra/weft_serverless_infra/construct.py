"""``WeftServerless``: the whole engine topology on one DynamoDB table.

Table, API function behind an IAM-authenticated REST API (or HTTP API), maintenance function
on an EventBridge schedule, a dead-letter queue for its failed deliveries, alarms that notify
an SNS topic, and outputs. Decisions are recorded in ``docs/decisions/0007-cdk-construct.md``
and ``docs/decisions/0017-deploy-defaults.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import CfnOutput, Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from weft_serverless_infra import _nag, names
from weft_serverless_infra.alarms import AlarmThresholds, WeftAlarms
from weft_serverless_infra.api import WeftApi
from weft_serverless_infra.functions import WeftFunction, dead_letter_queue
from weft_serverless_infra.http_api import WeftHttpApi
from weft_serverless_infra.run_events import WeftRunEvents
from weft_serverless_infra.timer_hints import WeftTimerHints

_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_API_GATEWAY_TIMEOUT = Duration.seconds(29)
MAX_RULE_TARGETS = 5
"""Targets one EventBridge rule may have."""
DEFAULT_MAINTENANCE_WORKERS = 16
"""Workers per tick, one per timer shard of a new table: with the defaults below, the
capacity model's first limit (the API throttle aside) is the table's write quota, above 30M
runs a day (docs/scaling.md; ADR 0055)."""
DEFAULT_PARALLEL_FIRES = 16
"""Runs a worker fires at once: the handler's default, measured by bench/firing_workers.py."""
DEFAULT_MAINTENANCE_MEMORY_MB = 512
"""A fire costs about 3 ms of CPU; at 512 MB (0.29 vCPU) a worker's CPU outruns its
parallel fires' round trips."""
DEFAULT_NEW_TABLE_SHARDS = {"timers": 16, "claims": 16, "status": 8}
"""Shard counts of a table the construct creates (``WEFT_NEW_STORE_SHARDS``): each index's
partition write limit above 100M runs a day of the model's default run at 101 WRU."""
API_KINDS = ("rest", "http")


class WeftServerless(Construct):
    """Deploys the weft-serverless engine for one set of workflows.

    Args:
        scope: Parent construct, usually a ``Stack``.
        construct_id: Construct id.
        workflows_module: Dotted module, inside the asset, exporting a ``workflows`` dict.
        code_path: Plain folder holding ``weft_serverless``, ``handlers``, the workflows
            package and the dependencies; ``infra/build_asset.py`` builds it. No Docker.
        maintenance_rate: How often EventBridge runs maintenance (timers, claim renewal).
            One invocation fires at most 1,000 due timers: the default sustains about
            1,000 due a minute (docs/deploy.md, "Timer capacity").
        maintenance_timeout: Must be shorter than the rate, so runs never overlap.
        api_timeout: At most 29 s, API Gateway's integration timeout, so the engine's time
            budget (read from the Lambda context) ends before the caller gives up.
        maintenance_workers: Maintenance invocations per tick, each told its share of the
            index shards (``{"worker": i, "workers": W}``: the shards ``s % W == i``), so
            firing scales out (ADR 0055). More workers than timer shards leave some idle.
        maintenance_parallel_fires: Runs each worker fires at once, on threads
            (``WEFT_MAINTENANCE_PARALLEL_FIRES``).
        maintenance_reserved_concurrency: At least ``maintenance_workers``, so every worker
            of a tick runs and a tick's worker never overlaps the previous tick's; None
            leaves it unreserved (for accounts whose concurrency quota cannot spare it).
        log_retention: Retention of the function and access log groups.
        removal_policy: Applies to the table, queue and log groups.
        deletion_protection: DynamoDB deletion protection on the table.
        alarm_thresholds: Counts at which each alarm fires, and over how many periods.
        alarm_topic: Every alarm notifies it; by default the construct creates one (output
            ``AlarmTopicArn``), which notifies nobody until somebody subscribes.
        alarm_email: If given, this address is subscribed to the alarm topic (AWS sends a
            confirmation mail first).
        offload_bucket: If given, large values may be offloaded there (``WEFT_OFFLOAD_BUCKET``).
        offload_prefix: Object key prefix the functions may read and write in that bucket;
            must match the storage adapter's ``offload_prefix``.
        web_acl_arn: If given, the WAFv2 web ACL is associated with the API stage (REST only).
        api: ``"rest"`` (REST API, payload 1.0) or ``"http"`` (HTTP API, payload 2.0, about
            a third of the price per request, no request validator and no WAF).
        api_throttle_rate: Steady requests per second the API stage accepts (then 429).
        api_throttle_burst: Requests the stage accepts in a burst above the rate.
        api_cloudwatch_role: Also set API Gateway's account-wide CloudWatch role (REST only).
            Off by default: it is one setting per account and region, shared by every REST
            API there; a REST API logs only once the account has one.
        run_events: Publish terminal and failure run events to EventBridge (ADR 0032): a
            bus (``event_bus``, else a new one), ``events:PutEvents`` for the maintenance
            function, ``WEFT_EVENT_BUS`` for both functions, and an example rule sending
            failed runs to the alarm topic. Off by default: no outbox is written then.
        event_bus: The bus to use with ``run_events`` (e.g. the account's default bus).
        shards: Shard counts of the table's indexes, chosen once when it is created (ADR
            0050): ``{"timers": 32, "claims": 32}``; unlisted indexes keep 4. Both functions
            get ``WEFT_SHARDS``; an engine refuses a table created with other counts, so
            change it only on a new table (docs/scaling.md, "Shard counts"). Unset, a
            table this construct creates takes ``DEFAULT_NEW_TABLE_SHARDS`` and a table
            created before keeps its own (``WEFT_NEW_STORE_SHARDS``).
        tracing: X-Ray active tracing (ADR 0042): both functions (``Tracing.ACTIVE``, with
            the X-Ray write actions it needs) and the REST API stage (X-Ray cannot trace an
            HTTP API). Export powertools' ``Tracer()`` as ``tracer`` from the workflows
            module to get a subsegment per drive and per activity attempt.
        timer_hints: A due timer fires within about a second (ADR 0054): a hint queue
            (encrypted, with a dead-letter queue and an alarm on it), the timer worker on an
            SQS event source mapping, and ``WEFT_TIMER_HINTS_QUEUE_URL`` for every engine
            function. Off, timers fire at the maintenance passes only.

    Attributes:
        table: The engine's DynamoDB table.
        api_handler: API function with its role and log group.
        maintenance_handler: Maintenance function with its role and log group.
        dead_letter_queue: Receives failed maintenance invocations and schedule deliveries.
        schedule: The first EventBridge rule that runs maintenance workers.
        schedules: Every such rule (five workers to a rule).
        rest_api: The REST API (None with ``api="http"``); ``grant_invoke`` lets a principal
            call the API.
        http_api: The HTTP API (None with ``api="rest"``).
        api_url: Base URL of the API (ends in ``/``).
        access_logs: Log group of the API's access log.
        alarm_topic: The SNS topic every alarm notifies.
        alarms: CloudWatch alarms by id.
        run_events: The bus, grant and example rule (None without ``run_events``).
        timer_hints: The hint queue, its dead-letter queue and the timer worker (None
            without ``timer_hints``).
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
        maintenance_memory_mb: int = DEFAULT_MAINTENANCE_MEMORY_MB,
        maintenance_workers: int = DEFAULT_MAINTENANCE_WORKERS,
        maintenance_parallel_fires: int = DEFAULT_PARALLEL_FIRES,
        maintenance_reserved_concurrency: int | None = DEFAULT_MAINTENANCE_WORKERS,
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
        api: str = "rest",
        api_throttle_rate: float = 100.0,
        api_throttle_burst: int = 200,
        api_cloudwatch_role: bool = False,
        alarm_email: str | None = None,
        run_events: bool = False,
        event_bus: events.IEventBus | None = None,
        tracing: bool = False,
        shards: Mapping[str, int] | None = None,
        timer_hints: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        rate = maintenance_rate or Duration.minutes(1)
        maintenance_timeout = maintenance_timeout or Duration.seconds(55)
        api_timeout = api_timeout or _API_GATEWAY_TIMEOUT
        _check_settings(workflows_module, code_path, rate, maintenance_timeout, api_timeout)
        _check_api(api, web_acl_arn, api_cloudwatch_role, api_throttle_rate, api_throttle_burst)

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
        self.dead_letter_queue = dead_letter_queue(self, removal_policy)
        environment = {
            names.TABLE_NAME_ENV: self.table.table_name,
            names.WORKFLOWS_MODULE_ENV: workflows_module,
            names.OWNERSHIP_ENV: names.OWNERSHIP,
            "POWERTOOLS_SERVICE_NAME": service_name,
            "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
        }
        if offload_bucket is not None:
            environment[names.OFFLOAD_BUCKET_ENV] = offload_bucket.bucket_name
        if event_bus is not None and not run_events:
            raise ValueError("event_bus is used only with run_events=True")
        if shards is not None:
            environment[names.SHARDS_ENV] = _shards_setting(shards)
        else:
            environment[names.NEW_STORE_SHARDS_ENV] = _shards_setting(DEFAULT_NEW_TABLE_SHARDS)
        _check_workers(
            maintenance_workers, maintenance_parallel_fires, maintenance_reserved_concurrency
        )
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
            # API Gateway invokes it synchronously: a dead-letter queue would never receive
            # anything, and failures reach the caller as a 5XX instead.
            dead_letter_queue=None,
            log_retention=log_retention,
            removal_policy=removal_policy,
            tracing=tracing,
        )
        self.maintenance_handler = maintenance_fn = WeftFunction(
            self,
            "MaintenanceHandler",
            code=code,
            handler=names.MAINTENANCE_HANDLER,
            description="weft-serverless maintenance (timers, claims, retention)",
            environment={
                **environment,
                names.PARALLEL_FIRES_ENV: str(maintenance_parallel_fires),
            },
            memory_mb=maintenance_memory_mb,
            timeout=maintenance_timeout,
            dead_letter_queue=self.dead_letter_queue,
            log_retention=log_retention,
            removal_policy=removal_policy,
            reserved_concurrency=maintenance_reserved_concurrency,
            retry_attempts=0,
            max_event_age=_event_age(rate),
            tracing=tracing,
        )
        engine_functions = [api_fn, maintenance_fn]
        self.timer_hints: WeftTimerHints | None = None
        if timer_hints:
            self.timer_hints = WeftTimerHints(
                self,
                "TimerHints",
                code=code,
                environment=environment,
                memory_mb=maintenance_memory_mb,
                log_retention=log_retention,
                removal_policy=removal_policy,
                tracing=tracing,
            )
            engine_functions.append(self.timer_hints.worker)
            for fn in engine_functions:
                self.timer_hints.grant_send(fn)
                for variable, value in self.timer_hints.environment.items():
                    fn.function.add_environment(variable, value)
        for fn in engine_functions:
            fn.grant_table(self.table)
            if offload_bucket is not None:
                fn.grant_offload(offload_bucket, offload_prefix)

        # One rule holds at most five targets: the workers go five to a rule, all on the
        # same rate, each target's input naming its worker's share.
        self.schedules = [
            events.Rule(
                self,
                "MaintenanceSchedule" + (str(first // MAX_RULE_TARGETS + 1) if first else ""),
                description="Runs weft-serverless maintenance",
                schedule=events.Schedule.rate(rate),
                targets=[
                    targets.LambdaFunction(
                        maintenance_fn.function,
                        event=events.RuleTargetInput.from_object(
                            {"worker": worker, "workers": maintenance_workers}
                        ),
                        dead_letter_queue=self.dead_letter_queue,
                        retry_attempts=2,
                        max_event_age=_event_age(rate),
                    )
                    for worker in range(first, min(first + MAX_RULE_TARGETS, maintenance_workers))
                ],
            )
            for first in range(0, maintenance_workers, MAX_RULE_TARGETS)
        ]
        self.schedule = self.schedules[0]
        self.rest_api: apigw.RestApi | None = None
        self.http_api: apigwv2.HttpApi | None = None
        if api == "rest":
            rest = WeftApi(
                self,
                "Http",
                handler=api_fn.function,
                stage_name=stage_name,
                log_retention=log_retention,
                removal_policy=removal_policy,
                cloudwatch_role=api_cloudwatch_role,
                web_acl_arn=web_acl_arn,
                throttle_rate=api_throttle_rate,
                throttle_burst=api_throttle_burst,
                tracing=tracing,
            )
            self.rest_api, self.access_logs = rest.rest_api, rest.access_logs
            self.api_url = self.rest_api.url
            server_errors = self.rest_api.metric_server_error()
        else:
            http = WeftHttpApi(
                self,
                "HttpApi",
                handler=api_fn.function,
                stage_name=stage_name,
                log_retention=log_retention,
                removal_policy=removal_policy,
                throttle_rate=api_throttle_rate,
                throttle_burst=api_throttle_burst,
            )
            self.http_api, self.access_logs = http.http_api, http.access_logs
            self._http_stage = http.stage
            self.api_url = http.stage.url + "/"  # as the REST API's: routes append to it
            server_errors = self.http_api.metric_server_error(
                dimensions_map={"ApiId": self.http_api.api_id, "Stage": stage_name}
            )
        self.alarm_topic = alarm_topic or self._alarm_topic()
        if alarm_email is not None:
            self.alarm_topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self.run_events: WeftRunEvents | None = None
        if run_events:
            self.run_events = WeftRunEvents(
                self,
                "RunEvents",
                publisher=maintenance_fn.role,
                bus=event_bus,
                source=names.EVENT_SOURCE,
                notify=self.alarm_topic,
            )
            for variable, value in self.run_events.environment.items():
                for fn in engine_functions:
                    fn.function.add_environment(variable, value)
        self.alarms = WeftAlarms(
            self,
            "Alarms",
            thresholds=alarm_thresholds or AlarmThresholds(),
            api_function=api_fn.function,
            maintenance_function=maintenance_fn.function,
            maintenance_rate=rate,
            api_server_errors=server_errors,
            dead_letter_queue=self.dead_letter_queue,
            hint_dead_letter_queue=(
                self.timer_hints.dead_letter_queue if self.timer_hints is not None else None
            ),
            topic=self.alarm_topic,
            metrics_namespace=metrics_namespace,
            service_name=service_name,
        ).alarms
        CfnOutput(self, "ApiUrl", value=self.api_url, description="Base URL of the API")
        CfnOutput(
            self,
            "AlarmTopicArn",
            value=self.alarm_topic.topic_arn,
            description="Every alarm notifies this topic: subscribe to it to hear of them",
        )
        CfnOutput(self, "TableName", value=self.table.table_name, description="Engine table")
        CfnOutput(
            self,
            "DeadLetterQueueUrl",
            value=self.dead_letter_queue.queue_url,
            description="Failed asynchronous invocations, for inspection and redrive",
        )

    def _alarm_topic(self) -> sns.Topic:
        """A topic for the alarms, so that an alarm always has somewhere to go.

        Unencrypted on purpose: CloudWatch alarms cannot publish to a topic encrypted with
        the AWS-managed aws/sns key, and notifications carry no workflow data. Pass
        ``alarm_topic`` to use a topic with a customer-managed key.
        """
        return sns.Topic(
            self, "AlarmTopic", display_name="weft-serverless alarms", enforce_ssl=True
        )

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` call every route of the deployed stage (``execute-api:Invoke``).

        The ARN ends in ``/*/*`` (any method, any path), so when ``grantee`` is a construct
        the matching cdk-nag finding is acknowledged on it.
        """
        if self.rest_api is not None:
            stage = self.rest_api.deployment_stage.stage_name
            resource = self.rest_api.arn_for_execute_api(method="*", path="/*", stage=stage)
        else:
            assert self.http_api is not None
            resource = self.http_api.arn_for_execute_api(
                method="*", path="/*", stage=self._http_stage.stage_name
            )
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


def _check_api(
    api: str, web_acl_arn: str | None, cloudwatch_role: bool, rate: float, burst: int
) -> None:
    """Fail at synth on an API choice that cannot be deployed as asked."""
    problems = []
    if api not in API_KINDS:
        problems.append(f"api must be 'rest' or 'http', got {api!r}")
    elif api == "http" and web_acl_arn is not None:
        problems.append("web_acl_arn needs api='rest': WAF cannot be attached to an HTTP API")
    elif api == "http" and cloudwatch_role:
        problems.append(
            "api_cloudwatch_role applies to REST APIs only; an HTTP API logs without it"
        )
    if not rate > 0 or burst < 1:
        problems.append("api_throttle_rate must be > 0 and api_throttle_burst at least 1")
    if problems:
        raise ValueError("WeftServerless: " + "; ".join(problems))


def _shards_setting(shards: Mapping[str, int]) -> str:
    """``WEFT_SHARDS`` for ``shards``, checked at synth as the engine checks it."""
    unknown = sorted(set(shards) - set(names.SHARD_INDEXES))
    if unknown:
        raise ValueError(
            f"WeftServerless: shards names unknown index(es) {unknown}; "
            f"the indexes are {list(names.SHARD_INDEXES)}"
        )
    for name, count in shards.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"WeftServerless: shards[{name!r}] must be a whole number")
        if not 1 <= count <= names.MAX_SHARDS:
            raise ValueError(
                f"WeftServerless: shards[{name!r}] must be from 1 to {names.MAX_SHARDS}"
            )
    return ",".join(f"{name}={shards[name]}" for name in names.SHARD_INDEXES if name in shards)


def _check_workers(workers: int, parallel_fires: int, reserved: int | None) -> None:
    """Fail at synth on a worker count EventBridge or the handler would refuse."""
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise ValueError("WeftServerless: maintenance_workers must be a whole number")
    if not 1 <= workers <= names.MAX_SHARDS:
        raise ValueError(
            f"WeftServerless: maintenance_workers must be from 1 to {names.MAX_SHARDS}"
        )
    if isinstance(parallel_fires, bool) or not isinstance(parallel_fires, int):
        raise ValueError("WeftServerless: maintenance_parallel_fires must be a whole number")
    if parallel_fires < 1:
        raise ValueError("WeftServerless: maintenance_parallel_fires must be at least 1")
    if reserved is not None and reserved < workers:
        raise ValueError(
            f"WeftServerless: maintenance_reserved_concurrency ({reserved}) must be at least "
            f"maintenance_workers ({workers}), or every tick throttles a worker"
        )


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
