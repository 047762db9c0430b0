"""The HTTP API (API Gateway v2) alternative to the REST API: IAM auth, logs, throttling.

An HTTP API costs $1.00 per million requests against the REST API's $3.50 and needs no
account-wide CloudWatch role for its access logs, but has no request validator and no WAF
association. It sends payload 2.0 events, which the API handler reads as well as 1.0 ones.
"""

from __future__ import annotations

import json

from aws_cdk import Names, RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from weft_serverless_infra.names import API_ROUTES

ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "caller": "$context.identity.caller",
    "user": "$context.identity.user",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "integrationError": "$context.integrationErrorMessage",
}


class WeftHttpApi(Construct):
    """``ANY`` on each path of ``API_ROUTES``, the REST API's routes, every route with IAM
    (SigV4) authorization.

    Attributes:
        http_api: The HTTP API.
        stage: Its one stage, with access logging and throttling.
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
        throttle_rate: float,
        throttle_burst: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=removal_policy
        )
        self.http_api = apigwv2.HttpApi(
            self,
            "Api",
            api_name=Names.unique_resource_name(self, max_length=64, separator="-"),
            description="weft-serverless workflow API; every route requires IAM (SigV4) auth",
            create_default_stage=False,
        )
        integration = integrations.HttpLambdaIntegration("Handler", handler)
        authorizer = authorizers.HttpIamAuthorizer()
        for path in API_ROUTES:
            self.http_api.add_routes(
                path=path,
                methods=[apigwv2.HttpMethod.ANY],
                integration=integration,
                authorizer=authorizer,
            )
        self.stage = apigwv2.HttpStage(
            self,
            "Stage",
            http_api=self.http_api,
            stage_name=stage_name,
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=throttle_rate, burst_limit=throttle_burst),
        )
        stage = self.stage.node.default_child
        assert isinstance(stage, apigwv2.CfnStage)
        stage.access_log_settings = apigwv2.CfnStage.AccessLogSettingsProperty(
            destination_arn=self.access_logs.log_group_arn,
            format=json.dumps(ACCESS_LOG_FORMAT, separators=(",", ":")),
        )
