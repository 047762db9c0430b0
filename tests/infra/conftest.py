"""Session fixtures for the CDK tests: every app is synthesised once per test session.

The first synthesis in a process starts jsii's node runtime and takes seconds; later ones
take a fraction of that, so all stacks live in two apps built here once: one as shipped,
one with every cdk-nag acknowledgement switched off (to prove each one is still needed).
Each app holds three stacks: ``infra/app.py`` as shipped, one with every knob turned, and
one with the HTTP API.
If the CDK packages are missing, every test using these fixtures fails with the fix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
if str(INFRA) not in sys.path:
    sys.path.insert(0, str(INFRA))

DEFAULT_STACK = "weft-test"
CUSTOM_STACK = "weft-custom"
HTTP_STACK = "weft-http"
ALARM_EMAIL = "ops@example.com"
OFFLOAD_BUCKET = "weft-offload-test"  # test_stack.py spells these three again
ALARM_TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:weft-alarms"
WEB_ACL_ARN = "arn:aws:wafv2:us-east-1:123456789012:regional/webacl/weft/0123"
ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


@dataclass
class Synth:
    """One synthesised stack: its template, construct handles and cdk-nag results."""

    stack: Any
    weft: Any
    template: Any
    acknowledged: dict[tuple[str, str], str]
    findings: list[tuple[str, str, str]]
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template.to_json()["Resources"]  # type: ignore[no-any-return]

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    def id(self, construct: Any) -> str:
        """Logical id of an L2 construct's CloudFormation resource (or of an L1 itself)."""
        element = getattr(construct.node, "default_child", None) or construct
        return str(self.stack.get_logical_id(element))

    def props(self, construct: Any) -> dict[str, Any]:
        return self.resources[self.id(construct)].get("Properties", {})  # type: ignore[no-any-return]


@dataclass
class Synthesis:
    default: Synth
    custom: Synth
    http: Synth

    def all(self) -> list[Synth]:
        return [self.default, self.custom, self.http]


def load_infra_module(name: str) -> Any:
    """Import ``infra/<name>.py`` under a private name, so ``app`` cannot clash with others."""
    spec = importlib.util.spec_from_file_location(f"_weft_infra_{name}", INFRA / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cdk() -> Any:
    try:
        import aws_cdk
        import cdk_nag  # noqa: F401
        import constructs  # noqa: F401
    except ImportError as exc:  # CI installs the extra; a silent skip would hide the infra
        pytest.fail(
            f"CDK packages are not importable ({exc}); install them with "
            "pip install -e '.[dev,cdk]'",
            pytrace=False,
        )
    return aws_cdk


@pytest.fixture(scope="session")
def infra_module() -> Callable[[str], Any]:
    """``load_infra_module``, for tests (``infra/`` scripts are not a package)."""
    return load_infra_module


@pytest.fixture(scope="session")
def cdk() -> Any:
    """The ``aws_cdk`` module, or a test failure saying how to install it."""
    return _cdk()


@pytest.fixture(scope="session")
def asset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny stand-in for the asset folder that ``infra/build_asset.py`` builds."""
    root = tmp_path_factory.mktemp("asset")
    for path in (
        "weft_serverless/__init__.py",
        "handlers/__init__.py",
        "handlers/api.py",
        "handlers/maintenance.py",
        "examples/__init__.py",
        "examples/order.py",
        "shop/__init__.py",
        "shop/flows.py",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("workflows = {}\n" if "order" in path or "flows" in path else "")
    return root


def _build(cdk: Any, outdir: Path, asset_dir: Path) -> tuple[Any, Synth, Synth, Synth]:
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_s3 as s3
    from aws_cdk import aws_sns as sns
    from weft_serverless_infra import AlarmThresholds, WeftServerless

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context |= {
        "codePath": str(asset_dir),
        "stackName": DEFAULT_STACK,
        "workflowsModule": "examples.order",
        "removalPolicy": "retain",
    }
    app = cdk.App(outdir=str(outdir), context=context)
    default_stack = load_infra_module("app").build(app)
    custom_stack = cdk.Stack(app, CUSTOM_STACK)
    custom = WeftServerless(
        custom_stack,
        "Weft",
        workflows_module="shop.flows",
        code_path=str(asset_dir),
        maintenance_rate=cdk.Duration.minutes(10),
        maintenance_timeout=cdk.Duration.minutes(9),
        maintenance_memory_mb=1024,
        maintenance_workers=3,
        maintenance_parallel_fires=32,
        maintenance_reserved_concurrency=None,
        api_timeout=cdk.Duration.seconds(10),
        api_memory_mb=1024,
        stage_name="prod",
        service_name="shop",
        metrics_namespace="Shop",
        log_retention=logs.RetentionDays.ONE_WEEK,
        removal_policy=cdk.RemovalPolicy.DESTROY,
        deletion_protection=False,
        alarm_thresholds=AlarmThresholds(
            period_minutes=15,
            api_errors=5,
            api_server_errors=6,
            throttles=7,
            maintenance_errors=2,
            dlq_messages=3,
            evaluation_periods=4,
            datapoints_to_alarm=3,
            workflows_failed=8,
            lost_commits=9,
            timer_lateness_seconds=900,
            finalizers_dead_lettered=2,
            events_dead_lettered=3,
        ),
        alarm_topic=sns.Topic.from_topic_arn(custom_stack, "Topic", ALARM_TOPIC_ARN),
        offload_bucket=s3.Bucket.from_bucket_name(custom_stack, "Bucket", OFFLOAD_BUCKET),
        web_acl_arn=WEB_ACL_ARN,
        api_throttle_rate=20,
        api_throttle_burst=40,
        api_cloudwatch_role=True,
        shards={"claims": 16, "timers": 8},
    )
    caller = iam.Role(custom_stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    custom.grant_invoke(caller)
    http_stack = cdk.Stack(app, HTTP_STACK)
    http = WeftServerless(
        http_stack,
        "Weft",
        workflows_module="examples.order",
        code_path=str(asset_dir),
        api="http",
        alarm_email=ALARM_EMAIL,
    )
    http_caller = iam.Role(http_stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    http.grant_invoke(http_caller)

    default_weft = default_stack.node.find_child("Weft")
    shells = (
        Synth(default_stack, default_weft, None, {}, []),
        Synth(custom_stack, custom, None, {}, [], {"caller": caller}),
        Synth(http_stack, http, None, {}, [], {"caller": http_caller}),
    )
    return app, *shells


def _synthesize(cdk: Any, app: Any, outdir: Path, *shells: Synth) -> None:
    """Synthesise ``app`` once and fill each stack's template and cdk-nag results."""
    from aws_cdk.assertions import Template

    try:
        assembly = app.synth()
    except RuntimeError as exc:
        if "ValidationFailed" not in str(exc):
            raise
        assembly = None
    report = json.loads((outdir / "validation-report.json").read_text())
    findings = [
        (violation["ruleName"], violation["severity"], construct["constructPath"])
        for plugin in report["pluginReports"]
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
    ]
    for synth in shells:
        name = synth.stack.stack_name
        synth.findings = [f for f in findings if f[2].startswith(f"{name}/")]
        synth.acknowledged = _acknowledgements(synth.stack)
        if assembly is not None:
            stack_template = assembly.get_stack_by_name(name).template
            synth.template = Template.from_json(stack_template)


def _acknowledgements(stack: Any) -> dict[tuple[str, str], str]:
    """(construct path, rule id) -> reason, for every acknowledgement in ``stack``."""
    found = {}
    for construct in stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == ACKNOWLEDGED:
                for rule, reason in entry.data.items():
                    found[(construct.node.path, rule.removeprefix("Annotation::"))] = reason
    return found


@pytest.fixture(scope="session")
def synthesis(asset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Synthesis:
    """Both stacks as shipped; synthesis raises if cdk-nag reports any unacknowledged error."""
    cdk = _cdk()
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, default, custom, http = _build(cdk, outdir, asset_dir)
    _synthesize(cdk, app, outdir, default, custom, http)
    if default.template is None:
        found = default.findings + custom.findings + http.findings
        rules = sorted({(rule, path) for rule, _, path in found})
        pytest.fail(f"cdk-nag findings not acknowledged: {rules}", pytrace=False)
    return Synthesis(default, custom, http)


@pytest.fixture(scope="session")
def unacknowledged(
    asset_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Synthesis]:
    """Both stacks rebuilt with acknowledgements disabled: the findings they would hide."""
    cdk = _cdk()
    from weft_serverless_infra import _nag

    outdir = tmp_path_factory.mktemp("cdk.out.unacknowledged")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_nag, "acknowledge", lambda *args, **kwargs: None)
        app, default, custom, http = _build(cdk, outdir, asset_dir)
        _synthesize(cdk, app, outdir, default, custom, http)
    yield Synthesis(default, custom, http)
