"""``run_events=True``: the bus, the maintenance function's PutEvents grant, the bus name for
both functions and the example rule; cdk-nag stays clean. Synthesised in an app of its own,
with a new bus and with the account's default bus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from weft_serverless.aws.runtime import EVENT_BUS_ENV
from weft_serverless.event_sink import EventBridgeSink


@pytest.fixture(scope="module")
def stacks(cdk: Any, asset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from aws_cdk import aws_events as events
    from aws_cdk.assertions import Template
    from cdk_nag import AwsSolutionsChecks
    from weft_serverless_infra import WeftServerless

    outdir = tmp_path_factory.mktemp("cdk.out.events")
    app = cdk.App(outdir=str(outdir))
    built = {}
    for name in ("weft-events-new", "weft-events-default"):
        stack = cdk.Stack(app, name)
        bus = None
        if name.endswith("default"):
            bus = events.EventBus.from_event_bus_name(stack, "DefaultBus", "default")
        weft = WeftServerless(
            stack,
            "Weft",
            workflows_module="examples.order",
            code_path=str(asset_dir),
            run_events=True,
            event_bus=bus,
        )
        built[name] = (stack, weft)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    try:
        assembly = app.synth()
    except RuntimeError as exc:
        report = json.loads((outdir / "validation-report.json").read_text())
        pytest.fail(f"cdk-nag findings: {report} ({exc})", pytrace=False)
    return {
        name: (Template.from_json(assembly.get_stack_by_name(name).template), stack, weft)
        for name, (stack, weft) in built.items()
    }


def _resources(template: Any, kind: str) -> dict[str, Any]:
    return {
        key: value
        for key, value in template.to_json()["Resources"].items()
        if value["Type"] == kind
    }


def test_names_match_the_runtime() -> None:
    from weft_serverless_infra import names

    assert names.EVENT_BUS_ENV == EVENT_BUS_ENV
    assert EventBridgeSink("bus").source == names.EVENT_SOURCE


def test_a_new_bus_with_the_grant_the_variable_and_the_rule(stacks: Any) -> None:
    template, stack, weft = stacks["weft-events-new"]
    [bus_id] = _resources(template, "AWS::Events::EventBus")
    bus = {"Ref": bus_id}
    for fn in (weft.api_handler, weft.maintenance_handler):
        logical_id = stack.get_logical_id(fn.function.node.default_child)
        props = template.to_json()["Resources"][logical_id]
        assert props["Properties"]["Environment"]["Variables"][EVENT_BUS_ENV] == bus
    policies = json.dumps(_resources(template, "AWS::IAM::Policy"))
    assert policies.count('"events:PutEvents"') == 1  # the maintenance function's role only
    maintenance_role = stack.get_logical_id(weft.maintenance_handler.role.node.default_child)
    [(_, policy)] = [
        (key, value)
        for key, value in _resources(template, "AWS::IAM::Policy").items()
        if "events:PutEvents" in json.dumps(value)
    ]
    assert policy["Properties"]["Roles"] == [{"Ref": maintenance_role}]
    rules = _resources(template, "AWS::Events::Rule")
    [failed] = [rule for rule in rules.values() if "EventBusName" in rule["Properties"]]
    assert failed["Properties"]["EventPattern"] == {
        "source": ["weft"],
        "detail-type": ["weft run.failed", "weft run.timed-out"],
    }
    [target] = failed["Properties"]["Targets"]
    assert target["Arn"] == {"Ref": stack.get_logical_id(weft.alarm_topic.node.default_child)}


def test_the_default_bus_when_given(stacks: Any) -> None:
    template, _, _ = stacks["weft-events-default"]
    assert _resources(template, "AWS::Events::EventBus") == {}
    text = json.dumps(template.to_json())
    assert ":event-bus/default" in text and '"events:PutEvents"' in text
