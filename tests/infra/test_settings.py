"""Construct and app settings: defaults, precedence and the errors raised before synthesis."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def test_runtime_is_the_newest_python_and_matches_the_asset_build(cdk: Any) -> None:
    from aws_cdk import aws_lambda
    from weft_serverless_infra.functions import RUNTIME
    from weft_serverless_infra.names import PYTHON_VERSION

    def version(runtime: Any) -> tuple[int, ...]:
        return tuple(int(part) for part in runtime.name.removeprefix("python").split("."))

    pythons = [
        getattr(aws_lambda.Runtime, name)
        for name in dir(aws_lambda.Runtime)
        if name.startswith("PYTHON_3_")
    ]
    assert RUNTIME.name == max(pythons, key=version).name == f"python{PYTHON_VERSION}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"workflows_module": "examples/order"}, "is not a dotted module path"),
        ({"workflows_module": "missing.flows"}, "missing/ (the workflows package)"),
        ({"code_path": "does-not-exist"}, "python infra/build_asset.py"),
        ({"maintenance_timeout": ("minutes", 1)}, "shorter than maintenance_rate"),
        ({"api_timeout": ("seconds", 30)}, "at most 29 s"),
        ({"api": "websocket"}, "api must be 'rest' or 'http'"),
        ({"api": "http", "web_acl_arn": "arn:aws:wafv2:x"}, "WAF cannot be attached"),
        ({"api": "http", "api_cloudwatch_role": True}, "REST APIs only"),
        ({"api_throttle_rate": 0}, "api_throttle_rate must be > 0"),
    ],
)
def test_construct_rejects_settings_that_would_deploy_a_broken_engine(
    cdk: Any, asset_dir: Path, overrides: dict[str, Any], message: str
) -> None:
    from weft_serverless_infra import WeftServerless

    kwargs: dict[str, Any] = {"workflows_module": "examples.order", "code_path": str(asset_dir)}
    for key, value in overrides.items():
        kwargs[key] = (
            getattr(cdk.Duration, value[0])(value[1]) if isinstance(value, tuple) else value
        )
    with pytest.raises(ValueError, match=re.escape(message)):
        WeftServerless(cdk.Stack(cdk.App(), "Invalid"), "Weft", **kwargs)


def test_app_settings_prefer_context_then_environment_then_default(
    cdk: Any, infra_module: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    app_module = infra_module("app")
    monkeypatch.delenv("WEFT_CODE_PATH", raising=False)
    assert app_module.setting(cdk.App(), "codePath") == "build/lambda"
    monkeypatch.setenv("WEFT_CODE_PATH", "from-env")
    assert app_module.setting(cdk.App(), "codePath") == "from-env"
    assert app_module.setting(cdk.App(context={"codePath": "from-ctx"}), "codePath") == "from-ctx"
    assert app_module.SETTINGS["workflowsModule"] == ("WEFT_WORKFLOWS_MODULE", "examples.order")


def test_app_rejects_an_unknown_removal_policy(
    cdk: Any, infra_module: Callable[[str], Any]
) -> None:
    app_module = infra_module("app")
    with pytest.raises(ValueError, match="removalPolicy"):
        app_module.build(cdk.App(context={"removalPolicy": "keep"}))


def test_app_rejects_an_unknown_cloudwatch_role_setting(
    cdk: Any, infra_module: Callable[[str], Any]
) -> None:
    app_module = infra_module("app")
    with pytest.raises(ValueError, match="apiCloudWatchRole"):
        app_module.build(cdk.App(context={"apiCloudWatchRole": "yes"}))


def test_app_defaults_leave_the_account_alone_and_choose_the_rest_api(
    infra_module: Callable[[str], Any],
) -> None:
    settings = infra_module("app").SETTINGS
    assert settings["api"] == ("WEFT_API", "rest")
    assert settings["apiCloudWatchRole"] == ("WEFT_API_CLOUDWATCH_ROLE", "false")
    assert settings["alarmEmail"] == ("WEFT_ALARM_EMAIL", "")
