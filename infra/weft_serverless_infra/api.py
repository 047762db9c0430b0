"""The REST API in front of the API function: IAM auth, validation and logging on every method."""

from __future__ import annotations

from aws_cdk import Names, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from weft_serverless_infra import _nag

PROXY_PARAMETER = "method.request.path.proxy"
CLOUDWATCH_ROLE_POLICY = (
    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"
)


class WeftApi(Construct):
    """``ANY /workflows``, ``ANY /workflows/{proxy+}``, ``ANY /activities/{proxy+}``,
    ``ANY /bulk`` and ``ANY /bulk/{proxy+}``.

    Routing stays in the handler (powertools ``APIGatewayRestResolver``), so API Gateway only
    authenticates (SigV4), checks required parameters, logs and forwards.

    Attributes:
        rest_api: The REST API; its deployment stage carries the logging settings.
        access_logs: Log group receiving one JSON access-log line per request.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        stage_name: str,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
        cloudwatch_role: bool,
        web_acl_arn: str | None,
        throttle_rate: float,
        throttle_burst: int,
        tracing: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=removal_policy
        )
        self.rest_api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=Names.unique_resource_name(self, max_length=64, separator="-"),
            description="weft-serverless workflow API; every method requires IAM (SigV4) auth",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=cloudwatch_role,
            default_integration=apigw.LambdaIntegration(handler, allow_test_invoke=False),
            default_method_options=apigw.MethodOptions(
                authorization_type=apigw.AuthorizationType.IAM
            ),
            deploy_options=apigw.StageOptions(
                stage_name=stage_name,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,
                metrics_enabled=True,
                throttling_rate_limit=throttle_rate,
                throttling_burst_limit=throttle_burst,
                tracing_enabled=tracing or None,  # X-Ray active tracing of the stage
            ),
        )
        self.rest_api.node.try_remove_child("Endpoint")  # the construct's ApiUrl replaces it
        validator = self.rest_api.add_request_validator(
            "Validator", validate_request_body=True, validate_request_parameters=True
        )
        workflows = self.rest_api.root.add_resource("workflows")
        workflows.add_method("ANY", request_validator=validator)
        bulk = self.rest_api.root.add_resource("bulk")  # bulk operations (ADR 0031)
        bulk.add_method("ANY", request_validator=validator)
        for parent in (workflows, self.rest_api.root.add_resource("activities"), bulk):
            parent.add_resource("{proxy+}").add_method(
                "ANY", request_validator=validator, request_parameters={PROXY_PARAMETER: True}
            )
        self._protect(cloudwatch_role, web_acl_arn)

    def _protect(self, cloudwatch_role: bool, web_acl_arn: str | None) -> None:
        _nag.acknowledge(
            self,
            "AwsSolutions-COG4",
            "Every method uses AWS_IAM authorization: callers are services and operators "
            "signing with IAM credentials, so a Cognito user pool would add nothing.",
        )
        if cloudwatch_role:
            _nag.acknowledge(
                self,
                f"AwsSolutions-IAM4[{CLOUDWATCH_ROLE_POLICY}]",
                "API Gateway's CloudWatch role is one account-wide setting shared by every "
                "REST API in the region, so it cannot be scoped to this API; this AWS-managed "
                "policy is the documented one for it.",
            )
        if web_acl_arn is None:
            _nag.acknowledge(
                self,
                "AwsSolutions-APIG3",
                "WAF is opt-in through web_acl_arn: unsigned requests are already rejected by "
                "IAM auth before any Lambda runs, and a web ACL costs at least $5 a month.",
            )
        else:
            wafv2.CfnWebACLAssociation(
                self,
                "WebAcl",
                resource_arn=self.rest_api.deployment_stage.stage_arn,
                web_acl_arn=web_acl_arn,
            )
