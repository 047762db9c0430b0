"""CDK app: one stack holding ``WeftServerless``, checked by cdk-nag on every synth.

Settings come from CDK context (``-c key=value``), else an environment variable, else a
default; see ``docs/deploy.md``.
"""

from __future__ import annotations

import os

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from weft_serverless_infra import WeftServerless

SETTINGS = {
    "workflowsModule": ("WEFT_WORKFLOWS_MODULE", "examples.order"),
    "codePath": ("WEFT_CODE_PATH", "build/lambda"),
    "stackName": ("WEFT_STACK_NAME", "weft-serverless"),
    "removalPolicy": ("WEFT_REMOVAL_POLICY", "retain"),
    "api": ("WEFT_API", "rest"),
    "apiCloudWatchRole": ("WEFT_API_CLOUDWATCH_ROLE", "false"),
    "alarmEmail": ("WEFT_ALARM_EMAIL", ""),
    "tracing": ("WEFT_TRACING", "false"),
}
"""Context key -> (environment variable, default)."""


def setting(app: cdk.App, key: str) -> str:
    """The value of one setting: context first, then its environment variable, then default."""
    env_var, default = SETTINGS[key]
    value = app.node.try_get_context(key)
    return str(value) if value is not None else os.environ.get(env_var, default)


def build(app: cdk.App) -> cdk.Stack:
    """Add the stack and the cdk-nag checks to ``app``; return the stack."""
    removal = setting(app, "removalPolicy")
    if removal not in ("retain", "destroy"):
        raise ValueError(f"removalPolicy must be 'retain' or 'destroy', got {removal!r}")
    destroy = removal == "destroy"
    cloudwatch_role = setting(app, "apiCloudWatchRole").lower()
    if cloudwatch_role not in ("true", "false"):
        raise ValueError(f"apiCloudWatchRole must be 'true' or 'false', got {cloudwatch_role!r}")
    tracing = setting(app, "tracing").lower()
    if tracing not in ("true", "false"):
        raise ValueError(f"tracing must be 'true' or 'false', got {tracing!r}")
    stack_name = setting(app, "stackName")
    stack = cdk.Stack(
        app,
        stack_name,
        description="weft-serverless durable execution engine",
        env=cdk.Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"),
            region=os.environ.get("CDK_DEFAULT_REGION"),
        ),
    )
    WeftServerless(
        stack,
        "Weft",
        workflows_module=setting(app, "workflowsModule"),
        code_path=setting(app, "codePath"),
        removal_policy=cdk.RemovalPolicy.DESTROY if destroy else cdk.RemovalPolicy.RETAIN,
        deletion_protection=not destroy,
        api=setting(app, "api"),
        api_cloudwatch_role=cloudwatch_role == "true",
        alarm_email=setting(app, "alarmEmail") or None,
        tracing=tracing == "true",
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


def main() -> None:
    """Entry point named by ``cdk.json``."""
    app = cdk.App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
