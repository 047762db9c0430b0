"""``tracing=True``: X-Ray active tracing on both functions, with the write actions Lambda
needs, and on the REST API's stage (an HTTP API has none); cdk-nag stays clean, and its one
acknowledgement hides a real finding. Synthesised in apps of their own; the shipped stack
(``synthesis``) shows the default is off."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conftest import Synthesis

XRAY_STATEMENT = {
    "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
    "Effect": "Allow",
    "Resource": "*",
}


def _synth(cdk: Any, outdir: Path, asset_dir: Path) -> tuple[Any, dict[str, Any]]:
    """An app of a REST and an HTTP stack with ``tracing=True``, checked by cdk-nag:
    (the synthesised assembly, or None when cdk-nag refused it; the stacks by name)."""
    from cdk_nag import AwsSolutionsChecks
    from weft_serverless_infra import WeftServerless

    app = cdk.App(outdir=str(outdir))
    built = {}
    for api in ("rest", "http"):
        stack = cdk.Stack(app, f"weft-traced-{api}")
        weft = WeftServerless(
            stack,
            "Weft",
            workflows_module="examples.order",
            code_path=str(asset_dir),
            api=api,
            tracing=True,
        )
        built[api] = (stack, weft)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    try:
        return app.synth(), built
    except RuntimeError as exc:
        if "ValidationFailed" not in str(exc):
            raise
        return None, built


@pytest.fixture(scope="module")
def traced(cdk: Any, asset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from aws_cdk.assertions import Template

    outdir = tmp_path_factory.mktemp("cdk.out.traced")
    assembly, built = _synth(cdk, outdir, asset_dir)
    if assembly is None:
        report = json.loads((outdir / "validation-report.json").read_text())
        pytest.fail(f"cdk-nag findings: {report}", pytrace=False)
    return {
        api: (Template.from_json(assembly.get_stack_by_name(stack.stack_name).template), weft)
        for api, (stack, weft) in built.items()
    }


def _of_type(template: Any, kind: str) -> dict[str, Any]:
    resources = template.to_json()["Resources"]
    return {key: value for key, value in resources.items() if value["Type"] == kind}


@pytest.mark.parametrize("api", ["rest", "http"])
def test_every_function_is_traced_with_the_xray_grant(traced: Any, api: str) -> None:
    template, _ = traced[api]
    functions = _of_type(template, "AWS::Lambda::Function").values()
    # the API, maintenance and timer worker functions
    assert [f["Properties"]["TracingConfig"] for f in functions] == [{"Mode": "Active"}] * 3
    policies = _of_type(template, "AWS::IAM::Policy").values()
    assert len(policies) == 3
    for policy in policies:
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statements.count(XRAY_STATEMENT) == 1
        wildcard = [s for s in statements if s["Resource"] == "*"]
        assert wildcard == [XRAY_STATEMENT]  # X-Ray's actions only: they take no resource


def test_the_rest_stage_is_traced_and_an_http_api_has_no_such_setting(traced: Any) -> None:
    rest, _ = traced["rest"]
    [stage] = _of_type(rest, "AWS::ApiGateway::Stage").values()
    assert stage["Properties"]["TracingEnabled"] is True
    http, _ = traced["http"]
    [http_stage] = _of_type(http, "AWS::ApiGatewayV2::Stage").values()
    assert "TracingEnabled" not in json.dumps(http_stage)


def test_tracing_is_off_unless_asked_for(synthesis: Synthesis) -> None:
    for synth in synthesis.all():
        text = json.dumps(synth.template.to_json())
        assert "TracingConfig" not in text and "TracingEnabled" not in text
        assert "xray:" not in text


def test_the_acknowledged_wildcard_is_a_real_finding(
    cdk: Any, asset_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from weft_serverless_infra import _nag

    outdir = tmp_path_factory.mktemp("cdk.out.traced.bare")
    real = _nag.acknowledge

    def all_but_xray(scope: Any, rule_id: str, reason: str) -> None:
        if rule_id != "AwsSolutions-IAM5[Resource::*]":
            real(scope, rule_id, reason)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_nag, "acknowledge", all_but_xray)
        assembly, _ = _synth(cdk, outdir, asset_dir)
    assert assembly is None
    report = json.loads((outdir / "validation-report.json").read_text())
    findings = {
        (violation["ruleName"], *construct["constructPath"].split("/")[:3:2])
        for plugin in report["pluginReports"]
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
    }
    assert findings == {
        ("AwsSolutions-IAM5[Resource::*]", f"weft-traced-{api}", handler)
        for api in ("rest", "http")
        for handler in ("ApiHandler", "MaintenanceHandler", "TimerHints")  # its Worker role
    }


def test_the_app_reads_the_tracing_setting(cdk: Any, infra_module: Callable[[str], Any]) -> None:
    app_module = infra_module("app")
    assert app_module.SETTINGS["tracing"] == ("WEFT_TRACING", "false")
    with pytest.raises(ValueError, match="tracing must be 'true' or 'false'"):
        app_module.build(cdk.App(context={"tracing": "yes"}))
