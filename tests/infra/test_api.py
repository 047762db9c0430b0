"""The REST API: IAM auth, request validation, logging and throttling on every method; the
HTTP API alternative with the same routes; the outputs."""

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
        "ANY /bulk",
        "ANY /bulk/{proxy+}",
        "ANY /schedules",
        "ANY /schedules/{proxy+}",
        "ANY /workflow-counts",
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
    assert suffixes == [
        "/*/activities/*",
        "/*/bulk",
        "/*/bulk/*",
        "/*/schedules",
        "/*/schedules/*",
        "/*/workflow-counts",
        "/*/workflows",
        "/*/workflows/*",
    ]


@pytest.mark.parametrize(
    ("variant", "stage_name", "rate", "burst"),
    [("default", "v1", 100, 200), ("custom", "prod", 20, 40)],
)
def test_stage_logs_access_and_errors_and_throttles(
    synthesis: Synthesis, variant: str, stage_name: str, rate: int, burst: int
) -> None:
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
            "ThrottlingBurstLimit": burst,
            "ThrottlingRateLimit": rate,
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
        "AlarmTopicArn": ref(synth.id(weft.alarm_topic)),
    }
    assert {synth.id(weft.node.find_child(name)): value for name, value in expected.items()} == {
        output_id: output["Value"] for output_id, output in outputs.items()
    }


# -- the HTTP API ------------------------------------------------------------------------------


def test_http_api_routes_require_iam_and_reach_the_api_function(synthesis: Synthesis) -> None:
    synth = synthesis.http
    assert synth.weft.rest_api is None
    synth.template.resource_count_is("AWS::ApiGateway::RestApi", 0)
    api = ref(synth.id(synth.weft.http_api))
    routes = synth.of_type("AWS::ApiGatewayV2::Route").values()
    assert sorted(r["Properties"]["RouteKey"] for r in routes) == [
        "ANY /activities/{proxy+}",
        "ANY /bulk",
        "ANY /bulk/{proxy+}",
        "ANY /schedules",
        "ANY /schedules/{proxy+}",
        "ANY /workflow-counts",
        "ANY /workflows",
        "ANY /workflows/{proxy+}",
    ]
    for route in routes:
        assert route["Properties"]["AuthorizationType"] == "AWS_IAM"
        assert route["Properties"]["ApiId"] == api
    synth.template.has_resource_properties(
        "AWS::ApiGatewayV2::Integration",
        Match.object_equals(
            {
                "ApiId": api,
                "IntegrationType": "AWS_PROXY",
                "IntegrationUri": arn(synth.id(synth.weft.api_handler.function)),
                "PayloadFormatVersion": "2.0",
            }
        ),
    )
    synth.template.resource_count_is("AWS::ApiGatewayV2::Integration", 1)


def test_http_api_stage_logs_and_throttles_without_an_account_role(synthesis: Synthesis) -> None:
    synth = synthesis.http
    stages = list(synth.of_type("AWS::ApiGatewayV2::Stage").values())
    assert len(stages) == 1
    stage = stages[0]["Properties"]
    assert stage["StageName"] == "v1" and stage["AutoDeploy"] is True
    assert stage["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": 200,
        "ThrottlingRateLimit": 100,
    }
    access = stage["AccessLogSettings"]
    assert access["DestinationArn"] == arn(synth.id(synth.weft.access_logs))
    fields = set(json.loads(access["Format"]))
    assert ACCESS_LOG_FIELDS - {"resourcePath"} <= fields and "routeKey" in fields
    synth.template.resource_count_is("AWS::ApiGateway::Account", 0)
    synth.template.resource_count_is("AWS::WAFv2::WebACLAssociation", 0)


def test_http_api_outputs_and_grant_invoke(synthesis: Synthesis) -> None:
    synth = synthesis.http
    api = ref(synth.id(synth.weft.http_api))
    url = {
        "Fn::Join": [
            "",
            [
                "https://",
                api,
                ".execute-api.",
                ref("AWS::Region"),
                ".",
                ref("AWS::URLSuffix"),
                "/v1/",
            ],
        ]
    }
    outputs = synth.template.find_outputs("*")
    assert outputs[synth.id(synth.weft.node.find_child("ApiUrl"))]["Value"] == url
    caller = synth.extras["caller"]
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
                api,
                "/v1/*/*",
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
            },
        },
    )
