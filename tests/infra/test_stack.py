"""Table, functions, IAM, schedule and dead-letter queue, resource by resource.

``synthesis.default`` is ``infra/app.py`` as shipped; ``synthesis.custom`` sets every
optional knob of ``WeftServerless`` away from its default. Both are synthesised once.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest

from weft_serverless.aws.maintenance import PARALLEL_ENV
from weft_serverless.aws.runtime import NEW_STORE_SHARDS_ENV, SHARDS_ENV, TIMER_HINTS_ENV
from weft_serverless.storage.dynamodb_schema import (
    OFFLOAD_BUCKET_ENV,
    TABLE_NAME_ENV,
    TTL_ATTRIBUTE,
    table_spec,
)

if TYPE_CHECKING:
    from conftest import Synth, Synthesis

with contextlib.suppress(ImportError):  # then the `synthesis` fixture fails every test
    from aws_cdk.assertions import Match
    from weft_serverless_infra import construct

OFFLOAD_BUCKET = "weft-offload-test"

TABLE_ACTIONS = [
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
]  # TransactWriteItems is no IAM action: transactions are authorised per item
LAMBDA_TRUST = {
    "Statement": [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
        }
    ],
    "Version": "2012-10-17",
}


def ref(logical_id: str) -> dict[str, Any]:
    return {"Ref": logical_id}


def arn(logical_id: str, attribute: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, attribute]}


def offload_objects() -> dict[str, Any]:
    objects = f":s3:::{OFFLOAD_BUCKET}/weft-values/*"
    return {"Fn::Join": ["", ["arn:", ref("AWS::Partition"), objects]]}


def both(synthesis: Synthesis) -> list[Synth]:
    return [synthesis.default, synthesis.custom]


# --- table ---------------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "protected"), [("default", True), ("custom", False)])
def test_table_is_the_runtime_schema(synthesis: Synthesis, variant: str, protected: bool) -> None:
    synth: Synth = getattr(synthesis, variant)
    spec = table_spec("unused")
    del spec["TableName"]  # CloudFormation names the table; the functions get it by env var
    synth.template.resource_count_is("AWS::DynamoDB::GlobalTable", 1)
    synth.template.has_resource(
        "AWS::DynamoDB::GlobalTable",
        {
            "Properties": Match.object_equals(
                {
                    "AttributeDefinitions": spec["AttributeDefinitions"],
                    "KeySchema": spec["KeySchema"],
                    "BillingMode": spec["BillingMode"],
                    "TimeToLiveSpecification": {"AttributeName": TTL_ATTRIBUTE, "Enabled": True},
                    "Replicas": [
                        {
                            "DeletionProtectionEnabled": protected,
                            "PointInTimeRecoverySpecification": {
                                "PointInTimeRecoveryEnabled": True
                            },
                            "Region": ref("AWS::Region"),
                        }
                    ],
                }
            ),
            "DeletionPolicy": "Retain" if protected else "Delete",
            "UpdateReplacePolicy": "Retain" if protected else "Delete",
        },
    )
    assert set(spec) == {"AttributeDefinitions", "KeySchema", "BillingMode"}


# --- functions -----------------------------------------------------------------------


def _environment(synth: Synth, module: str, service: str, namespace: str) -> dict[str, Any]:
    return {
        TABLE_NAME_ENV: ref(synth.id(synth.weft.table)),
        "WEFT_WORKFLOWS_MODULE": module,
        "WEFT_OWNERSHIP": "workflow-lease",
        "POWERTOOLS_SERVICE_NAME": service,
        "POWERTOOLS_METRICS_NAMESPACE": namespace,
        TIMER_HINTS_ENV: ref(synth.id(synth.weft.timer_hints.queue)),
    }


def _function(
    synth: Synth,
    handler: Any,
    *,
    path: str,
    description: str,
    environment: dict[str, Any],
    memory: int,
    timeout: int,
    reserved: int | None,
) -> None:
    expected: dict[str, Any] = {
        "Architectures": ["arm64"],
        "Code": {"S3Bucket": Match.any_value(), "S3Key": Match.string_like_regexp(r"\.zip$")},
        "Description": description,
        "Environment": {"Variables": environment},
        "Handler": path,
        "LoggingConfig": {"LogGroup": ref(synth.id(handler.log_group))},
        "MemorySize": memory,
        "Role": arn(synth.id(handler.role)),
        "Runtime": "python3.14",
        "Timeout": timeout,
    }
    if reserved is not None:
        expected["ReservedConcurrentExecutions"] = reserved
    if handler is synth.weft.maintenance_handler:
        # only asynchronous invocations reach a dead-letter queue; API Gateway's are synchronous
        expected["DeadLetterConfig"] = {"TargetArn": arn(synth.id(synth.weft.dead_letter_queue))}
    synth.template.has_resource_properties("AWS::Lambda::Function", Match.object_equals(expected))


def test_default_functions(synthesis: Synthesis) -> None:
    synth = synthesis.default
    env = _environment(synth, "examples.order", "weft", "Weft") | {
        # a table the construct creates takes these; one created before keeps its own
        NEW_STORE_SHARDS_ENV: "timers=16,status=8,claims=16",
    }
    synth.template.resource_count_is("AWS::Lambda::Function", 3)  # with the timer worker
    _function(
        synth,
        synth.weft.api_handler,
        path="handlers.api.handler",
        description="weft-serverless API handler",
        environment=env,
        memory=512,
        timeout=29,
        reserved=None,
    )
    _function(
        synth,
        synth.weft.maintenance_handler,
        path="handlers.maintenance.handler",
        description="weft-serverless maintenance (timers, claims, retention)",
        environment=env | {PARALLEL_ENV: "16"},
        memory=512,
        timeout=55,
        reserved=16,  # one per worker of a tick
    )


def test_custom_functions(synthesis: Synthesis) -> None:
    synth = synthesis.custom
    env = _environment(synth, "shop.flows", "shop", "Shop") | {
        OFFLOAD_BUCKET_ENV: OFFLOAD_BUCKET,
        SHARDS_ENV: "timers=8,claims=16",  # read back by parse_shards in every function
    }
    _function(
        synth,
        synth.weft.api_handler,
        path="handlers.api.handler",
        description="weft-serverless API handler",
        environment=env,
        memory=1024,
        timeout=10,
        reserved=None,
    )
    _function(
        synth,
        synth.weft.maintenance_handler,
        path="handlers.maintenance.handler",
        description="weft-serverless maintenance (timers, claims, retention)",
        environment=env | {PARALLEL_ENV: "32"},
        memory=1024,
        timeout=540,
        reserved=None,
    )


@pytest.mark.parametrize(("variant", "age"), [("default", 60), ("custom", 600)])
def test_maintenance_async_invocations_are_not_retried(
    synthesis: Synthesis, variant: str, age: int
) -> None:
    synth: Synth = getattr(synthesis, variant)
    synth.template.resource_count_is("AWS::Lambda::EventInvokeConfig", 1)
    synth.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        Match.object_equals(
            {
                "FunctionName": ref(synth.id(synth.weft.maintenance_handler.function)),
                "MaximumEventAgeInSeconds": age,
                "MaximumRetryAttempts": 0,
                "Qualifier": "$LATEST",
            }
        ),
    )


@pytest.mark.parametrize(("variant", "days"), [("default", 30), ("custom", 7)])
def test_log_groups_have_bounded_retention(synthesis: Synthesis, variant: str, days: int) -> None:
    synth: Synth = getattr(synthesis, variant)
    groups = synth.of_type("AWS::Logs::LogGroup")
    weft = synth.weft
    expected = {
        weft.api_handler.log_group,
        weft.maintenance_handler.log_group,
        weft.timer_hints.worker.log_group,
        weft.access_logs,
    }
    assert set(groups) == {synth.id(g) for g in expected}
    policy = "Retain" if variant == "default" else "Delete"
    for group in groups.values():
        assert group["Properties"] == {"RetentionInDays": days}
        assert group["DeletionPolicy"] == group["UpdateReplacePolicy"] == policy


# --- IAM -----------------------------------------------------------------------------


def _expected_statements(synth: Synth, handler: Any, *, offload: bool) -> list[dict[str, Any]]:
    statements = [
        {
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Effect": "Allow",
            "Resource": arn(synth.id(handler.log_group)),
        },
        {
            # SendMessageBatch is authorised as SendMessage: hints, and (maintenance only,
            # merged into the same statement) failed asynchronous invocations
            "Action": "sqs:SendMessage",
            "Effect": "Allow",
            "Resource": arn(synth.id(synth.weft.timer_hints.queue)),
        },
        {"Action": TABLE_ACTIONS, "Effect": "Allow", "Resource": arn(synth.id(synth.weft.table))},
    ]
    if handler is synth.weft.timer_hints.worker:
        # the event source mapping's consume grant, merged with the send on the same queue
        statements[1]["Action"] = [
            "sqs:ChangeMessageVisibility",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
            "sqs:ReceiveMessage",
            "sqs:SendMessage",
        ]
    if handler is synth.weft.maintenance_handler:
        statements[1]["Resource"] = [
            arn(synth.id(synth.weft.dead_letter_queue)),
            arn(synth.id(synth.weft.timer_hints.queue)),
        ]
    if offload:
        statements.append(
            {
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Effect": "Allow",
                "Resource": offload_objects(),
            }
        )
    return statements


@pytest.mark.parametrize("variant", ["default", "custom"])
@pytest.mark.parametrize("handler_name", ["api_handler", "maintenance_handler", "worker"])
def test_function_roles_hold_exactly_their_statements(
    synthesis: Synthesis, variant: str, handler_name: str
) -> None:
    synth: Synth = getattr(synthesis, variant)
    owner = synth.weft.timer_hints if handler_name == "worker" else synth.weft
    handler = getattr(owner, handler_name)
    role_id = synth.id(handler.role)
    assert synth.props(handler.role) == {
        "AssumeRolePolicyDocument": LAMBDA_TRUST,
        "Description": "Execution role of " + synth.props(handler.function)["Description"],
    }
    attached = [
        policy["Properties"]
        for policy in synth.of_type("AWS::IAM::Policy").values()
        if ref(role_id) in policy["Properties"]["Roles"]
    ]
    assert len(attached) == 1
    assert attached[0]["Roles"] == [ref(role_id)]
    expected = _expected_statements(synth, handler, offload=variant == "custom")
    assert attached[0]["PolicyDocument"] == {"Statement": expected, "Version": "2012-10-17"}


def test_no_grant_uses_a_bare_wildcard(synthesis: Synthesis) -> None:
    for synth in both(synthesis):
        for policy in synth.of_type("AWS::IAM::Policy").values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                resources = statement["Resource"]
                for action in actions if isinstance(actions, list) else [actions]:
                    assert "*" not in action
                for resource in resources if isinstance(resources, list) else [resources]:
                    assert resource != "*"


def test_only_an_asked_for_api_gateway_account_role_uses_a_managed_policy(
    synthesis: Synthesis,
) -> None:
    """The account-wide CloudWatch role is set only with ``api_cloudwatch_role=True``."""
    custom = synthesis.custom
    account_role = custom.weft.rest_api.node.find_child("CloudWatchRole")
    managed = {
        role_id: role["Properties"]["ManagedPolicyArns"]
        for synth in synthesis.all()
        for role_id, role in synth.of_type("AWS::IAM::Role").items()
        if "ManagedPolicyArns" in role["Properties"]
    }
    partition = ref("AWS::Partition")
    policy = ":iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"
    assert managed == {custom.id(account_role): [{"Fn::Join": ["", ["arn:", partition, policy]]}]}
    custom.template.has_resource_properties(
        "AWS::ApiGateway::Account",
        Match.object_equals({"CloudWatchRoleArn": arn(custom.id(account_role))}),
    )
    synthesis.default.template.resource_count_is("AWS::ApiGateway::Account", 0)
    synthesis.http.template.resource_count_is("AWS::ApiGateway::Account", 0)


def test_grant_invoke_allows_execute_api_on_the_stage(synthesis: Synthesis) -> None:
    synth = synthesis.custom
    caller = synth.extras["caller"]
    stage = synth.weft.rest_api.deployment_stage
    resource = {
        "Fn::Join": [
            "",
            [
                "arn:",
                ref("AWS::Partition"),
                ":execute-api:",
                ref("AWS::Region"),
                ":",
                ref("AWS::AccountId"),
                ":",
                ref(synth.id(synth.weft.rest_api)),
                "/",
                ref(synth.id(stage)),
                "/*/*",
            ],
        ]
    }
    synth.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [ref(synth.id(caller))],
            "PolicyDocument": {
                "Statement": [
                    {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": resource}
                ],
                "Version": "2012-10-17",
            },
        },
    )


# --- schedule and dead letters -------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "expression", "age", "workers"),
    [("default", "rate(1 minute)", 60, 16), ("custom", "rate(10 minutes)", 600, 3)],
)
def test_schedule_runs_every_maintenance_worker_with_its_share(
    synthesis: Synthesis, variant: str, expression: str, age: int, workers: int
) -> None:
    synth: Synth = getattr(synthesis, variant)
    maintenance = synth.id(synth.weft.maintenance_handler.function)
    rules = synth.template.find_resources("AWS::Events::Rule")
    assert len(rules) == len(synth.weft.schedules) == -(-workers // 5)  # 5 targets a rule
    shares = []
    for rule_id, rule in rules.items():
        props = rule["Properties"]
        assert props["ScheduleExpression"] == expression
        assert props["Description"] == "Runs weft-serverless maintenance"
        assert props["State"] == "ENABLED"
        assert 1 <= len(props["Targets"]) <= 5
        for target in props["Targets"]:
            assert target["Arn"] == arn(maintenance)
            assert target["DeadLetterConfig"] == {
                "Arn": arn(synth.id(synth.weft.dead_letter_queue))
            }
            assert target["RetryPolicy"] == {
                "MaximumEventAgeInSeconds": age,
                "MaximumRetryAttempts": 2,
            }
            shares.append(json.loads(target["Input"]))
        synth.template.has_resource_properties(
            "AWS::Lambda::Permission",
            Match.object_equals(
                {
                    "Action": "lambda:InvokeFunction",
                    "FunctionName": arn(maintenance),
                    "Principal": "events.amazonaws.com",
                    "SourceArn": arn(rule_id),
                }
            ),
        )
    assert sorted(shares, key=lambda share: share["worker"]) == [
        {"worker": worker, "workers": workers} for worker in range(workers)
    ]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"maintenance_workers": 0}, "from 1 to 256"),
        ({"maintenance_workers": 257}, "from 1 to 256"),
        ({"maintenance_workers": 2.0}, "whole number"),
        ({"maintenance_parallel_fires": 0}, "at least 1"),
        ({"maintenance_workers": 9, "maintenance_reserved_concurrency": 8}, "at least"),
    ],
)
def test_a_bad_worker_setting_fails_at_synth(options: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        construct._check_workers(
            options.get("maintenance_workers", 8),
            options.get("maintenance_parallel_fires", 16),
            options.get("maintenance_reserved_concurrency", 8),
        )


def test_dead_letter_queue_is_encrypted_and_ssl_only(synthesis: Synthesis) -> None:
    synth = synthesis.default
    queue = synth.id(synth.weft.dead_letter_queue)
    synth.template.resource_count_is("AWS::SQS::Queue", 3)  # with the hint queue and its DLQ
    synth.template.has_resource(
        "AWS::SQS::Queue",
        {
            "Properties": Match.object_equals(
                {"MessageRetentionPeriod": 14 * 24 * 3600, "SqsManagedSseEnabled": True}
            ),
            "DeletionPolicy": "Retain",
        },
    )
    synth.template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        Match.object_equals(
            {
                "PolicyDocument": {
                    "Statement": [
                        {
                            "Action": "sqs:*",
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            "Effect": "Deny",
                            "Principal": {"AWS": "*"},
                            "Resource": arn(queue),
                        },
                        # each schedule rule (five workers to a rule) may dead-letter here
                        *(
                            {
                                "Action": "sqs:SendMessage",
                                "Condition": {"ArnEquals": {"aws:SourceArn": arn(synth.id(rule))}},
                                "Effect": "Allow",
                                "Principal": {"Service": "events.amazonaws.com"},
                                "Resource": arn(queue),
                                "Sid": Match.any_value(),
                            }
                            for rule in synth.weft.schedules
                        ),
                    ],
                    "Version": "2012-10-17",
                },
                "Queues": [ref(queue)],
            }
        ),
    )
