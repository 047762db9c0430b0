"""cdk-nag: nothing unacknowledged, and every acknowledgement still hides a real finding."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Synth, Synthesis

OFFLOAD_BUCKET = "weft-offload-test"


def both(synthesis: Synthesis) -> list[Synth]:
    return synthesis.all()


DEFAULT_INVENTORY = {
    "AWS::ApiGateway::Deployment": 1,
    "AWS::ApiGateway::Method": 8,
    "AWS::ApiGateway::RequestValidator": 1,
    "AWS::ApiGateway::Resource": 9,
    "AWS::ApiGateway::RestApi": 1,
    "AWS::ApiGateway::Stage": 1,
    "AWS::CloudWatch::Alarm": 13,  # TimerHintDeadLetters joined (ADR 0054)
    "AWS::DynamoDB::GlobalTable": 1,
    "AWS::Events::Rule": 4,  # 16 maintenance workers, at most 5 targets a rule
    "AWS::IAM::Policy": 3,
    "AWS::IAM::Role": 3,
    "AWS::Lambda::EventInvokeConfig": 1,
    "AWS::Lambda::EventSourceMapping": 1,
    "AWS::Lambda::Function": 3,
    "AWS::Lambda::Permission": 12,
    "AWS::Logs::LogGroup": 4,
    "AWS::SNS::Topic": 1,
    "AWS::SNS::TopicPolicy": 1,
    "AWS::SQS::Queue": 3,
    "AWS::SQS::QueuePolicy": 3,
}


def test_default_stack_holds_nothing_else(synthesis: Synthesis) -> None:
    counts: dict[str, int] = {}
    for resource in synthesis.default.resources.values():
        counts[resource["Type"]] = counts.get(resource["Type"], 0) + 1
    assert counts == DEFAULT_INVENTORY


def test_cdk_nag_reports_no_unacknowledged_finding(synthesis: Synthesis) -> None:
    for synth in both(synthesis):
        assert synth.findings == []


def test_acknowledged_findings_are_the_documented_ones(synthesis: Synthesis) -> None:
    iam4 = "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
    objects = f"Resource::arn:<AWS::Partition>:s3:::{OFFLOAD_BUCKET}/weft-values/*"
    assert sorted(synthesis.default.acknowledged) == [
        ("weft-test/Weft/Http", "AwsSolutions-APIG3"),
        ("weft-test/Weft/Http", "AwsSolutions-COG4"),
    ]
    custom = synthesis.custom
    api, stage = custom.id(custom.weft.rest_api), custom.id(custom.weft.rest_api.deployment_stage)
    execute_api = (
        "Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:"
        f"<{api}>/<{stage}>/*/*"
    )
    assert sorted(custom.acknowledged) == [
        ("weft-custom/Caller", f"AwsSolutions-IAM5[{execute_api}]"),
        ("weft-custom/Weft/ApiHandler/Role", f"AwsSolutions-IAM5[{objects}]"),
        ("weft-custom/Weft/Http", "AwsSolutions-COG4"),
        ("weft-custom/Weft/Http", f"AwsSolutions-IAM4[{iam4}AmazonAPIGatewayPushToCloudWatchLogs]"),
        ("weft-custom/Weft/MaintenanceHandler/Role", f"AwsSolutions-IAM5[{objects}]"),
        ("weft-custom/Weft/TimerHints/Worker/Role", f"AwsSolutions-IAM5[{objects}]"),
    ]
    http = synthesis.http
    http_api = http.id(http.weft.http_api)
    http_execute = (
        "Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:"
        f"<{http_api}>/v1/*/*"
    )
    assert sorted(http.acknowledged) == [
        ("weft-http/Caller", f"AwsSolutions-IAM5[{http_execute}]"),
    ]
    for synth in both(synthesis):
        assert all(len(reason) >= 40 for reason in synth.acknowledged.values())


def test_every_acknowledgement_hides_a_real_finding(
    synthesis: Synthesis, unacknowledged: Synthesis
) -> None:
    for synth, bare in zip(both(synthesis), both(unacknowledged), strict=True):

        def covers(ack: tuple[str, str], rule: str, path: str) -> bool:
            return ack[1] == rule and (path == ack[0] or path.startswith(ack[0] + "/"))

        assert bare.findings, "without acknowledgements cdk-nag must report findings"
        for rule, _, path in bare.findings:
            assert any(covers(ack, rule, path) for ack in synth.acknowledged), (rule, path)
        for ack in synth.acknowledged:
            assert any(covers(ack, rule, path) for rule, _, path in bare.findings), ack
