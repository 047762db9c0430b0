"""The REST API: IAM auth, request validation and logging on every method; the outputs."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conftest import Synth, Synthesis

with contextlib.suppress(ImportError):  # then the `synthesis` fixture fails every test
    from aws_cdk.assertions import Match

WEB_ACL_ARN = "arn:aws:wafv2:us-east-1:123456789012:regional/webacl/weft/0123"
ACCESS_LOG_FIELDS = {
    "requestId",
    "ip",
    "user",
    "caller",
    "requestTime",
    "httpMethod",
    "resourcePath",
    "status",
    "protocol",
    "responseLength",
}


def ref(logical_id: str) -> dict[str, Any]:
    return {"Ref": logical_id}


def arn(logical_id: str, attribute: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, attribute]}


def _method_paths(synth: Synth) -> dict[str, str]:
    """Method logical id -> "VERB /path", walking each method's resource up to the root."""
    resources = synth.of_type("AWS::ApiGateway::Resource")

    def path(resource_id: dict[str, Any]) -> str:
        logical_id = resource_id.get("Ref")
        if logical_id not in resources:
            return ""
        props = resources[logical_id]["Properties"]
        return f"{path(props['ParentId'])}/{props['PathPart']}"

    methods = synth.of_type("AWS::ApiGateway::Method")
    return {
        method_id: f"{m['Properties']['HttpMethod']} {path(m['Properties']['ResourceId'])}"
        for method_id, m in methods.items()
    }


@pytest.mark.parametrize("variant", ["default", "custom"])
def test_every_method_requires_iam_and_validation(synthesis: Synthesis, variant: str) -> None:
    synth: Synth = getattr(synthesis, variant)
    paths = _method_paths(synth)
    assert sorted(paths.values()) == [
        "ANY /activities/{proxy+}",
        "ANY /workflows",
        "ANY /workflows/{proxy+}",
    ]
    validator = synth.id(synth.weft.rest_api.node.find_child("Validator"))
    api_function = synth.id(synth.weft.api_handler.function)
    synth.template.all_resources_properties(
        "AWS::ApiGateway::Method",
        {
            "AuthorizationType": "AWS_IAM",
            "RequestValidatorId": ref(validator),
            "Integration": {
                "IntegrationHttpMethod": "POST",
                "Type": "AWS_PROXY",
                "Uri": {"Fn::Join": ["", Match.array_with([arn(api_function)])]},
            },
        },
    )
    for method_id, route in paths.items():
        parameters = synth.resources[method_id]["Properties"].get("RequestParameters")
        expected = {"method.request.path.proxy": True} if route.endswith("{proxy+}") else None
        assert parameters == expected, route
    synth.template.has_resource_properties(
        "AWS::ApiGateway::RequestValidator",
        Match.object_equals(
            {
                "RestApiId": ref(synth.id(synth.weft.rest_api)),
                "ValidateRequestBody": True,
                "ValidateRequestParameters": True,
            }
        ),
    )


@pytest.mark.parametrize("variant", ["default", "custom"])
def test_api_gateway_may_invoke_only_its_routes(synthesis: Synthesis, variant: str) -> None:
    synth: Synth = getattr(synthesis, variant)
    api_function = arn(synth.id(synth.weft.api_handler.function))
    invokes = [
        p["Properties"]
        for p in synth.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
    ]
    assert all(p["FunctionName"] == api_function for p in invokes)
    suffixes = sorted(p["SourceArn"]["Fn::Join"][1][-1] for p in invokes)
    assert suffixes == ["/*/activities/*", "/*/workflows", "/*/workflows/*"]


@pytest.mark.parametrize(("variant", "stage_name"), [("default", "v1"), ("custom", "prod")])
def test_stage_logs_access_and_errors(synthesis: Synthesis, variant: str, stage_name: str) -> None:
    synth: Synth = getattr(synthesis, variant)
    stage = synth.props(synth.weft.rest_api.deployment_stage)
    access = stage["AccessLogSetting"]
    assert ref(synth.id(synth.weft.access_logs)) in access["DestinationArn"]["Fn::Join"][1]
    assert set(json.loads(access["Format"])) == ACCESS_LOG_FIELDS
    assert stage["MethodSettings"] == [
        {
            "DataTraceEnabled": False,
            "HttpMethod": "*",
            "LoggingLevel": "ERROR",
            "MetricsEnabled": True,
            "ResourcePath": "/*",
        }
    ]
    assert stage["StageName"] == stage_name
    assert synth.props(synth.weft.rest_api) == {
        "Description": "weft-serverless workflow API; every method requires IAM (SigV4) auth",
        "EndpointConfiguration": {"Types": ["REGIONAL"]},
        "Name": synth.props(synth.weft.rest_api)["Name"],
    }


def test_web_acl_is_associated_only_when_given(synthesis: Synthesis) -> None:
    synthesis.default.template.resource_count_is("AWS::WAFv2::WebACLAssociation", 0)
    custom = synthesis.custom
    custom.template.has_resource_properties(
        "AWS::WAFv2::WebACLAssociation",
        Match.object_equals(
            {
                "ResourceArn": {
                    "Fn::Join": [
                        "",
                        [
                            "arn:",
                            ref("AWS::Partition"),
                            ":apigateway:",
                            ref("AWS::Region"),
                            "::/restapis/",
                            ref(custom.id(custom.weft.rest_api)),
                            "/stages/",
                            ref(custom.id(custom.weft.rest_api.deployment_stage)),
                        ],
                    ]
                },
                "WebACLArn": WEB_ACL_ARN,
            }
        ),
    )


def test_outputs(synthesis: Synthesis) -> None:
    synth = synthesis.default
    weft = synth.weft
    outputs = synth.template.find_outputs("*")
    expected = {
        "ApiUrl": {
            "Fn::Join": [
                "",
                [
                    "https://",
                    ref(synth.id(weft.rest_api)),
                    ".execute-api.",
                    ref("AWS::Region"),
                    ".",
                    ref("AWS::URLSuffix"),
                    "/",
                    ref(synth.id(weft.rest_api.deployment_stage)),
                    "/",
                ],
            ]
        },
        "TableName": ref(synth.id(weft.table)),
        "DeadLetterQueueUrl": ref(synth.id(weft.dead_letter_queue)),
    }
    assert {synth.id(weft.node.find_child(name)): value for name, value in expected.items()} == {
        output_id: output["Value"] for output_id, output in outputs.items()
    }
