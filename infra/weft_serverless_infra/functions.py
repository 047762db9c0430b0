"""One Lambda function of the engine, with its own role, log group and explicit grants.

Each function gets a role with no managed policy: the CloudWatch Logs, DynamoDB and S3
statements are written out action by action, so the template shows every permission
the code holds and cdk-nag has nothing broad to flag. With active tracing, Lambda adds
X-Ray's two write actions, on ``*`` (they take no resource), to the same policy.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from weft_serverless_infra import _nag

RUNTIME = lambda_.Runtime.PYTHON_3_14
"""The newest Python runtime in aws-cdk-lib; ``names.PYTHON_VERSION`` must match it."""

TABLE_ACTIONS = (
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
)
"""What the DynamoDB storage adapter calls: GetItem, PutItem, DeleteItem, Query, and
BatchWriteItem for bulk purges. IAM has no TransactWriteItems or TransactGetItems action:
a transaction is authorised item by item as PutItem, DeleteItem, ConditionCheckItem or
GetItem, which is why ConditionCheckItem is here and no Transact* action is."""

LOG_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")
OFFLOAD_ACTIONS = ("s3:GetObject", "s3:PutObject")
"""The adapter uploads and reads offloaded values; it never deletes them (objects are shared
by identical values, so a bucket lifecycle rule expires them)."""


class WeftFunction(Construct):
    """A Python arm64 function running one handler of the engine from a plain asset folder.

    Attributes:
        function: The Lambda function.
        role: Its execution role; holds only the statements this class adds.
        log_group: The function's log group, created here so retention is bounded.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        memory_mb: int,
        timeout: Duration,
        dead_letter_queue: sqs.IQueue | None,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        reserved_concurrency: int | None = None,
        retry_attempts: int | None = None,
        max_event_age: Duration | None = None,
        tracing: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=removal_policy
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of {description}",
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(LOG_ACTIONS), resources=[self.log_group.log_group_arn])
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            code=code,
            handler=handler,
            description=description,
            environment=dict(environment),
            memory_size=memory_mb,
            timeout=timeout,
            role=self.role,
            log_group=self.log_group,
            dead_letter_queue=dead_letter_queue,
            reserved_concurrent_executions=reserved_concurrency,
            retry_attempts=retry_attempts,
            max_event_age=max_event_age,
            # Lambda's own two X-Ray write actions join the role's policy with it (below)
            tracing=lambda_.Tracing.ACTIVE if tracing else None,
        )
        if tracing:
            _nag.acknowledge(
                self.role,
                "AwsSolutions-IAM5[Resource::*]",
                "X-Ray's PutTraceSegments and PutTelemetryRecords have no resource-level "
                "permissions: '*' is the only resource IAM accepts for them.",
            )

    def grant_table(self, table: dynamodb.ITableV2) -> None:
        """Allow exactly the adapter's DynamoDB calls on the table itself (no index ARNs)."""
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(TABLE_ACTIONS), resources=[table.table_arn])
        )

    def grant_offload(self, bucket: s3.IBucket, prefix: str) -> None:
        """Allow reading and writing offloaded values under ``prefix`` in ``bucket``.

        Object keys are content digests chosen at run time, so the resource must end in
        ``*``; the matching cdk-nag finding is acknowledged here with that reason.
        """
        objects = bucket.arn_for_objects(f"{prefix}*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(OFFLOAD_ACTIONS), resources=[objects])
        )
        _nag.acknowledge(
            self.role,
            _nag.wildcard_resource_rule(self, objects),
            "Offloaded values are objects named by their content digest at run time, so the "
            "grant covers one key prefix of one bucket and nothing else.",
        )


def dead_letter_queue(scope: Construct, removal_policy: RemovalPolicy) -> sqs.Queue:
    """Where messages that kept failing go (a function's failed async events, timer hints
    received too often): encrypted, TLS only, kept 14 days. One shape for every such queue
    of the stack, each its own ``DeadLetterQueue`` under its construct."""
    return sqs.Queue(
        scope,
        "DeadLetterQueue",
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(14),
        removal_policy=removal_policy,
    )
